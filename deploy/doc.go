// Package deploy holds no code. Its folder has what runs mintgate: the
// Dockerfile, the Kubernetes manifests (k8s), the AWS resources (terraform),
// the NATS server configs (nats), and the local stack's scripts (local);
// the tests in checks (a module of its own) check those files by parsing
// them, as no Docker engine, Kubernetes or terraform runs where the tests do.
package deploy
