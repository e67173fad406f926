package config

// AWS is what the environment given to a service's run says about AWS: a
// region and static credentials, each optional. Reading them through
// getenv, rather than letting the SDK read the process environment, lets a
// test give each in-process service its own.
type AWS struct {
	Region                             string
	AccessKey, SecretKey, SessionToken string
}

// AWS reads AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN; a key without its secret (or the reverse) is a problem.
func (e *Env) AWS() AWS {
	a := AWS{
		Region:       e.String("AWS_REGION", ""),
		AccessKey:    e.String("AWS_ACCESS_KEY_ID", ""),
		SecretKey:    string(e.Secret("AWS_SECRET_ACCESS_KEY")),
		SessionToken: string(e.Secret("AWS_SESSION_TOKEN")),
	}
	if (a.AccessKey == "") != (a.SecretKey == "") {
		e.Fail("AWS_ACCESS_KEY_ID", "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither")
	}
	return a
}
