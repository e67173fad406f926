package checks_test

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// tfModule is deploy/terraform parsed: its top-level blocks, with the source
// of every file so an expression can be read back as written.
type tfModule struct {
	blocks []*hclsyntax.Block
	src    map[string][]byte
}

func loadTerraform(t *testing.T) *tfModule {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root(t), "deploy", "terraform", "*.tf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no deploy/terraform/*.tf (%v)", err)
	}
	m := &tfModule{src: map[string][]byte{}}
	parser := hclparse.NewParser()
	for _, name := range files {
		f, diags := parser.ParseHCLFile(name)
		if diags.HasErrors() {
			t.Fatalf("%s: %v", name, diags)
		}
		m.src[name] = f.Bytes
		m.blocks = append(m.blocks, f.Body.(*hclsyntax.Body).Blocks...)
	}
	return m
}

// block is the top-level block with these labels ("aws_s3_bucket", "uploads").
func (m *tfModule) block(t *testing.T, typ string, labels ...string) *hclsyntax.Block {
	t.Helper()
	for _, b := range m.blocks {
		if b.Type == typ && slices.Equal(b.Labels, labels) {
			return b
		}
	}
	t.Fatalf("no %s %q in deploy/terraform", typ, labels)
	return nil
}

func (m *tfModule) resource(t *testing.T, labels ...string) *hclsyntax.Block {
	t.Helper()
	return m.block(t, "resource", labels...)
}

// text is an expression as written in the file.
func (m *tfModule) text(e hclsyntax.Expression) string {
	r := e.Range()
	return string(r.SliceBytes(m.src[r.Filename]))
}

// attr is the source text of a block's attribute, or "" without it.
func (m *tfModule) attr(b *hclsyntax.Block, name string) string {
	if a, ok := b.Body.Attributes[name]; ok {
		return m.text(a.Expr)
	}
	return ""
}

// literal is a constant attribute's value; references make it fail.
func literal(t *testing.T, b *hclsyntax.Block, name string) cty.Value {
	t.Helper()
	a, ok := b.Body.Attributes[name]
	if !ok {
		t.Fatalf("%s %q at %s: no %s", b.Type, b.Labels, b.DefRange(), name)
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		t.Fatalf("%s %q: %s is not a constant: %v", b.Type, b.Labels, name, diags)
	}
	return v
}

// strs is a constant list of strings, or the source text of each element
// when the elements are references or templates.
func (m *tfModule) strs(t *testing.T, b *hclsyntax.Block, name string) []string {
	t.Helper()
	a, ok := b.Body.Attributes[name]
	if !ok {
		return nil
	}
	tuple, ok := a.Expr.(*hclsyntax.TupleConsExpr)
	if !ok {
		t.Fatalf("%s %q: %s is not a list literal: %s", b.Type, b.Labels, name, m.text(a.Expr))
	}
	var out []string
	for _, e := range tuple.Exprs {
		if v, diags := e.Value(nil); !diags.HasErrors() && v.Type() == cty.String {
			out = append(out, v.AsString())
		} else {
			out = append(out, m.text(e))
		}
	}
	return out
}

func children(b *hclsyntax.Block, typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, c := range b.Body.Blocks {
		if c.Type == typ {
			out = append(out, c)
		}
	}
	return out
}

// TestTerraformFormatted: what `terraform fmt -check` would say.
func TestTerraformFormatted(t *testing.T) {
	for name, src := range loadTerraform(t).src {
		if out := hclwrite.Format(src); !bytes.Equal(out, src) {
			t.Errorf("%s is not formatted as terraform fmt would", filepath.Base(name))
		}
	}
}

// TestTerraformReferences is the part of `terraform validate` that needs no
// provider: every var., local., data. and resource reference is declared.
func TestTerraformReferences(t *testing.T) {
	m := loadTerraform(t)
	declared := map[string]bool{}
	for _, b := range m.blocks {
		switch b.Type {
		case "variable":
			declared["var."+b.Labels[0]] = true
		case "resource":
			declared[b.Labels[0]+"."+b.Labels[1]] = true
		case "data":
			declared["data."+b.Labels[0]+"."+b.Labels[1]] = true
		case "locals":
			for name := range b.Body.Attributes {
				declared["local."+name] = true
			}
		}
	}
	for _, b := range m.blocks {
		if b.Type == "variable" {
			continue // its type = string is a type expression, not a reference
		}
		_ = hclsyntax.VisitAll(b.Body, func(n hclsyntax.Node) hcl.Diagnostics {
			e, ok := n.(hclsyntax.Expression)
			if !ok {
				return nil
			}
			for _, tr := range e.Variables() {
				ref := refName(tr)
				if ref != "" && !declared[ref] {
					t.Errorf("%s: %s is not declared", tr.SourceRange(), ref)
				}
			}
			return nil
		})
	}
}

// refName is the declared object a traversal starts from, or "" for names
// that are not declarations (count, each, path, self, terraform).
func refName(tr hcl.Traversal) string {
	var parts []string
	for _, s := range tr {
		switch s := s.(type) {
		case hcl.TraverseRoot:
			parts = append(parts, s.Name)
		case hcl.TraverseAttr:
			parts = append(parts, s.Name)
		}
	}
	want := 2
	switch parts[0] {
	case "count", "each", "path", "self", "terraform":
		return ""
	case "data":
		want = 3
	}
	if len(parts) < want {
		return strings.Join(parts, ".")
	}
	return strings.Join(parts[:want], ".")
}

func TestTerraformProvider(t *testing.T) {
	m := loadTerraform(t)
	tf := m.block(t, "terraform")
	rp := children(tf, "required_providers")
	if len(rp) != 1 {
		t.Fatal("no required_providers")
	}
	aws := literal(t, rp[0], "aws").AsValueMap()
	if aws["source"].AsString() != "hashicorp/aws" || !strings.HasPrefix(aws["version"].AsString(), "~> 5.") {
		t.Errorf("aws provider: want hashicorp/aws pinned to ~> 5.x, got %v", aws)
	}
}

// TestTerraformBucket: private, encrypted, and cleaned of what nobody claimed.
func TestTerraformBucket(t *testing.T) {
	m := loadTerraform(t)

	pab := m.resource(t, "aws_s3_bucket_public_access_block", "uploads")
	for _, name := range []string{"block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"} {
		if v := literal(t, pab, name); !v.RawEquals(cty.True) {
			t.Errorf("public access block: %s = %#v, want true", name, v)
		}
	}
	if got := m.attr(pab, "bucket"); got != "aws_s3_bucket.uploads.id" {
		t.Errorf("public access block is on %s", got)
	}

	sse := m.resource(t, "aws_s3_bucket_server_side_encryption_configuration", "uploads")
	var algos []string
	for _, rule := range children(sse, "rule") {
		for _, d := range children(rule, "apply_server_side_encryption_by_default") {
			algos = append(algos, literal(t, d, "sse_algorithm").AsString())
		}
	}
	if len(algos) == 0 {
		t.Error("no default server-side encryption")
	}

	lc := m.resource(t, "aws_s3_bucket_lifecycle_configuration", "uploads")
	var expires, aborts bool
	for _, rule := range children(lc, "rule") {
		if literal(t, rule, "status").AsString() != "Enabled" {
			continue
		}
		prefix := ""
		for _, f := range children(rule, "filter") {
			if _, ok := f.Body.Attributes["prefix"]; ok {
				prefix = literal(t, f, "prefix").AsString()
			}
		}
		if prefix == "incoming/" && len(children(rule, "expiration")) == 1 {
			expires = true
		}
		if len(children(rule, "abort_incomplete_multipart_upload")) == 1 {
			aborts = true
		}
	}
	if !expires {
		t.Error("no enabled lifecycle rule expires objects under incoming/")
	}
	if !aborts {
		t.Error("no enabled lifecycle rule aborts incomplete multipart uploads")
	}
}

// TestTerraformEvents: every object created under incoming/ is announced on
// the queue, only S3 for our bucket may announce, and what the completer
// cannot read goes to a dead-letter queue.
func TestTerraformEvents(t *testing.T) {
	m := loadTerraform(t)

	n := m.resource(t, "aws_s3_bucket_notification", "uploads")
	queues := children(n, "queue")
	if len(queues) != 1 {
		t.Fatalf("want one queue notification, got %d", len(queues))
	}
	q := queues[0]
	if got := m.strs(t, q, "events"); !slices.Equal(got, []string{"s3:ObjectCreated:*"}) {
		t.Errorf("notification events %q, want s3:ObjectCreated:*", got)
	}
	if got := literal(t, q, "filter_prefix").AsString(); got != "incoming/" {
		t.Errorf("notification filter_prefix %q, want incoming/", got)
	}
	if got := m.attr(q, "queue_arn"); got != "aws_sqs_queue.uploads.arn" {
		t.Errorf("notification goes to %s", got)
	}
	if got := m.attr(n, "depends_on"); !strings.Contains(got, "aws_sqs_queue_policy.uploads") {
		t.Error("the notification must wait for the queue policy: S3 checks it may send when it is applied")
	}

	redrive := m.attr(m.resource(t, "aws_sqs_queue", "uploads"), "redrive_policy")
	for _, want := range []string{"deadLetterTargetArn", "aws_sqs_queue.uploads_dlq.arn", "maxReceiveCount"} {
		if !strings.Contains(redrive, want) {
			t.Errorf("queue redrive_policy lacks %s: %s", want, redrive)
		}
	}

	if got := m.attr(m.resource(t, "aws_sqs_queue_policy", "uploads"), "policy"); got != "data.aws_iam_policy_document.queue.json" {
		t.Fatalf("queue policy is %s", got)
	}
	st := m.statements(t, "queue")
	if len(st) != 1 {
		t.Fatalf("queue policy: want one statement, got %d", len(st))
	}
	s := st[0]
	if s.effect != "Allow" || !slices.Equal(s.actions, []string{"sqs:SendMessage"}) || !slices.Equal(s.resources, []string{"aws_sqs_queue.uploads.arn"}) {
		t.Errorf("queue policy: %+v, want Allow sqs:SendMessage on the queue", s)
	}
	if !slices.Equal(s.principals, []string{`Service:s3.amazonaws.com`}) {
		t.Errorf("queue policy principals %q, want the S3 service only", s.principals)
	}
	if !slices.Contains(s.conditions, "ArnEquals aws:SourceArn aws_s3_bucket.uploads.arn") {
		t.Errorf("queue policy conditions %q: want aws:SourceArn = the bucket's ARN", s.conditions)
	}
}

// statement is one statement of an aws_iam_policy_document, as written.
type statement struct {
	effect             string
	actions, resources []string
	notActions, notRes []string
	principals         []string // "type:identifier"
	conditions         []string // "test variable value"
	notPrincipals      bool
}

// statements reads data "aws_iam_policy_document" name.
func (m *tfModule) statements(t *testing.T, name string) []statement {
	t.Helper()
	doc := m.block(t, "data", "aws_iam_policy_document", name)
	var out []statement
	for _, b := range children(doc, "statement") {
		s := statement{effect: "Allow"}
		if _, ok := b.Body.Attributes["effect"]; ok {
			s.effect = literal(t, b, "effect").AsString()
		}
		s.actions = m.strs(t, b, "actions")
		s.resources = m.strs(t, b, "resources")
		s.notActions = m.strs(t, b, "not_actions")
		s.notRes = m.strs(t, b, "not_resources")
		for _, p := range children(b, "principals") {
			typ := literal(t, p, "type").AsString()
			for _, id := range m.strs(t, p, "identifiers") {
				s.principals = append(s.principals, typ+":"+id)
			}
		}
		if len(children(b, "not_principals")) > 0 {
			s.notPrincipals = true
		}
		for _, c := range children(b, "condition") {
			for _, v := range m.strs(t, c, "values") {
				s.conditions = append(s.conditions, m.attrValue(c, "test")+" "+m.attrValue(c, "variable")+" "+v)
			}
		}
		out = append(out, s)
	}
	if len(children(doc, "statement")) != len(doc.Body.Blocks) || len(doc.Body.Attributes) > 0 {
		t.Errorf("policy document %s: only statement blocks, no source_policy_documents or overrides", name)
	}
	return out
}

// attrValue is a constant string attribute, or its source text.
func (m *tfModule) attrValue(b *hclsyntax.Block, name string) string {
	a, ok := b.Body.Attributes[name]
	if !ok {
		return ""
	}
	if v, diags := a.Expr.Value(nil); !diags.HasErrors() && v.Type() == cty.String {
		return v.AsString()
	}
	return m.text(a.Expr)
}

// TestTerraformLeastPrivilege: each role may do exactly its service's job.
// The signer's credentials authorise every presigned URL it hands out, so
// its policy is also the most any URL can ever do.
func TestTerraformLeastPrivilege(t *testing.T) {
	m := loadTerraform(t)

	for _, b := range m.blocks {
		if b.Type != "resource" {
			continue
		}
		switch b.Labels[0] {
		case "aws_iam_role_policy_attachment", "aws_iam_policy_attachment", "aws_iam_policy", "aws_iam_user", "aws_iam_access_key":
			t.Errorf("resource %s %s: roles get inline policies from policy documents only (no managed policies, no users or keys)", b.Labels[0], b.Labels[1])
		case "aws_iam_role":
			for _, forbidden := range []string{"managed_policy_arns", "inline_policy"} {
				if m.attr(b, forbidden) != "" || len(children(b, forbidden)) > 0 {
					t.Errorf("role %s: %s", b.Labels[1], forbidden)
				}
			}
		}
	}

	// role name → (its permissions document, its trust document, its service account)
	roles := map[string]struct{ policy, trust, sa string }{
		signer:    {"signer", "signer_trust", "mintgate-signer"},
		completer: {"completer", "completer_trust", "mintgate-completer"},
		sweeper:   {"sweeper", "sweeper_trust", "mintgate-sweeper"},
	}
	var rolePolicies int
	for _, b := range m.blocks {
		if b.Type == "resource" && b.Labels[0] == "aws_iam_role_policy" {
			rolePolicies++
		}
		if b.Type == "resource" && b.Labels[0] == "aws_iam_role" {
			if _, ok := roles[b.Labels[1]]; !ok {
				t.Errorf("unexpected role %s", b.Labels[1])
			}
		}
	}
	if rolePolicies != len(roles) {
		t.Errorf("%d aws_iam_role_policy, want one per role (%d)", rolePolicies, len(roles))
	}
	for name, r := range roles {
		role := m.resource(t, "aws_iam_role", name)
		if got := m.attr(role, "assume_role_policy"); got != "data.aws_iam_policy_document."+r.trust+".json" {
			t.Errorf("role %s trusts %s", name, got)
		}
		rp := m.resource(t, "aws_iam_role_policy", name)
		if got := m.attr(rp, "role"); got != "aws_iam_role."+name+".id" && got != "aws_iam_role."+name+".name" {
			t.Errorf("policy %s is on role %s", name, got)
		}
		if got := m.attr(rp, "policy"); got != "data.aws_iam_policy_document."+r.policy+".json" {
			t.Errorf("role %s's policy is %s", name, got)
		}

		trust := m.statements(t, r.trust)
		if len(trust) != 1 || trust[0].effect != "Allow" || !slices.Equal(trust[0].actions, []string{"sts:AssumeRoleWithWebIdentity"}) {
			t.Errorf("role %s: trust %+v, want one Allow sts:AssumeRoleWithWebIdentity", name, trust)
		} else if !slices.ContainsFunc(trust[0].conditions, func(c string) bool {
			return strings.HasPrefix(c, "StringEquals ") && strings.Contains(c, `:sub" `) && strings.HasSuffix(c, ":"+r.sa+`"`)
		}) {
			t.Errorf("role %s: trust conditions %q do not pin the service account %s", name, trust[0].conditions, r.sa)
		}
	}

	// The signer: PutObject (presigned PUTs, and a multipart upload's
	// create, parts and complete), then what multipart needs besides:
	// list its parts, abort it, and HeadObject (s3:GetObject) to tell a
	// completed upload from an aborted one. The sweeper: abort and
	// HeadObject. All on incoming/* only, but for s3:ListBucket on the
	// bucket: without it S3 answers the HeadObject of a missing object
	// 403, and the multipart closer could never tell an aborted upload.
	incoming := []string{`"${aws_s3_bucket.uploads.arn}/incoming/*"`}
	bucketOnly := []string{"aws_s3_bucket.uploads.arn"}
	type grant struct{ actions, resources []string }
	for role, want := range map[string][]grant{
		"signer": {{[]string{"s3:PutObject"}, incoming},
			{[]string{"s3:AbortMultipartUpload", "s3:GetObject", "s3:ListMultipartUploadParts"}, incoming},
			{[]string{"s3:ListBucket"}, bucketOnly}},
		"sweeper": {{[]string{"s3:AbortMultipartUpload", "s3:GetObject"}, incoming},
			{[]string{"s3:ListBucket"}, bucketOnly}},
	} {
		st := m.statements(t, role)
		if len(st) != len(want) {
			t.Fatalf("%s policy: want %d statements, got %d", role, len(want), len(st))
		}
		for i, s := range st {
			if got := slices.Sorted(slices.Values(s.actions)); s.effect != "Allow" || !slices.Equal(got, want[i].actions) || !slices.Equal(s.resources, want[i].resources) {
				t.Errorf("%s policy statement %d: %+v, want exactly %v on %v", role, i, s, want[i].actions, want[i].resources)
			}
		}
	}

	completerSt := m.statements(t, "completer")
	if len(completerSt) != 5 {
		t.Fatalf("completer policy: want five statements (the queue, its DLQ, incoming/, quarantine/, the bucket), got %d", len(completerSt))
	}
	// On the queue: DeleteMessageBatch is authorised by sqs:DeleteMessage
	// and ChangeMessageVisibilityBatch (extending the messages it holds
	// while Redis is down) by sqs:ChangeMessageVisibility;
	// GetQueueAttributes is the completer's read-only readiness check and
	// its read of the RedrivePolicy. On the DLQ: GetQueueUrl resolves it
	// from the policy's ARN, GetQueueAttributes reads its depth; never a
	// receive or a delete there.
	for i, want := range []struct {
		resource string
		actions  []string
	}{
		{"aws_sqs_queue.uploads.arn", []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"}},
		{"aws_sqs_queue.uploads_dlq.arn", []string{"sqs:GetQueueUrl", "sqs:GetQueueAttributes"}},
		// The verification gate reads an upload (HeadObject, ranged
		// GETs, the scan) and moves a rejected one: copy to quarantine/,
		// delete from incoming/; a redelivery that finds it moved HEADs
		// the quarantined copy. Never a write into incoming/, never a
		// delete in quarantine/.
		{`"${aws_s3_bucket.uploads.arn}/incoming/*"`, []string{"s3:GetObject", "s3:DeleteObject"}},
		{`"${aws_s3_bucket.uploads.arn}/quarantine/*"`, []string{"s3:PutObject", "s3:GetObject"}},
		// Only so that a missing object is a 404, which the completer
		// reads as "gone" (S3 answers 403 to a caller that may not list).
		{"aws_s3_bucket.uploads.arn", []string{"s3:ListBucket"}},
	} {
		s := completerSt[i]
		if got := slices.Sorted(slices.Values(s.actions)); !slices.Equal(got, slices.Sorted(slices.Values(want.actions))) {
			t.Errorf("completer policy allows %v on %s, want exactly %v", s.actions, want.resource, want.actions)
		}
		if s.effect != "Allow" || !slices.Equal(s.resources, []string{want.resource}) {
			t.Errorf("completer policy statement %d: %+v, want Allow on %s only", i, s, want.resource)
		}
	}

	// No document grants a wildcard, or grants by exclusion.
	for _, b := range m.blocks {
		if b.Type != "data" || b.Labels[0] != "aws_iam_policy_document" {
			continue
		}
		for _, s := range m.statements(t, b.Labels[1]) {
			if len(s.notActions)+len(s.notRes) > 0 || s.notPrincipals {
				t.Errorf("policy %s: not_actions, not_resources or not_principals", b.Labels[1])
			}
			if s.effect != "Allow" {
				continue // a Deny narrows, it may be broad
			}
			for _, v := range append(slices.Clone(s.actions), s.principals...) {
				if strings.Contains(v, "*") {
					t.Errorf("policy %s allows %q", b.Labels[1], v)
				}
			}
			for _, r := range s.resources {
				if strings.Contains(r, "*") && !strings.HasSuffix(r, `/incoming/*"`) && !strings.HasSuffix(r, `/quarantine/*"`) {
					t.Errorf("policy %s allows on %s", b.Labels[1], r)
				}
			}
		}
	}
}

func TestTerraformOutputs(t *testing.T) {
	m := loadTerraform(t)
	for name, want := range map[string]string{
		"queue_url":          "aws_sqs_queue.uploads.url",
		"bucket_name":        "aws_s3_bucket.uploads.id",
		"signer_role_arn":    "aws_iam_role.signer.arn",
		"completer_role_arn": "aws_iam_role.completer.arn",
	} {
		if got := m.attr(m.block(t, "output", name), "value"); got != want {
			t.Errorf("output %s = %s, want %s", name, got, want)
		}
	}
}
