// Preloaded into fauxqs (NODE_OPTIONS=--import=<this file>) by
// deploy/local/s3sqs.sh and shared/testenv/sqs.go: fauxqs 2.4 listens on
// 0.0.0.0 whatever it is told (startFauxqs in its dist/app.js passes
// host "0.0.0.0" to listen; FAUXQS_HOST only names the host in queue URLs),
// which would put a credential-free SQS on every interface. This turns a
// listen on 0.0.0.0 (or on no host, which means all of them) into one on
// 127.0.0.1; nothing else changes.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const o = args[0];
  if (o !== null && typeof o === "object" && o.path == null && (o.host == null || o.host === "0.0.0.0" || o.host === "::")) {
    args[0] = { ...o, host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};
