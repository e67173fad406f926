package api

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The TypeScript client's types (api/js/src/api.ts) and the schemas of
// openapi.yaml they stand for. A field renamed on either side, a type that
// no longer fits, or a new type in api.ts without an entry here fails
// TestJSTypesMatchOpenAPI.
var jsSchemas = map[string][]string{
	"Limits":           {"Limits"},
	"SignRequest":      {"SignRequest"},
	"SignResponse":     {"SignResponse"},
	"MultipartGrant":   {"MultipartCreateResponse"},
	"SignedPart":       {"PartsResponse/parts/[]"},
	"PartToSign":       {"PartsRequest/parts/[]"},
	"ListedPart":       {"PartList/parts/[]"},
	"CompletedPart":    {"CompleteRequest/parts/[]"},
	"CompleteResponse": {"CompleteResponse"},
	"StatusResponse":   {"UploadStatus"},
	"Bucket":           {"QuotaScope"},
	"QuotaResponse":    {"Quota"},
	"DownloadResponse": {"DownloadResponse"},
	// Every error answer: the common body, or the 429s' with more.
	"ErrorBody": {"Error", "ReadLimited", "RateLimited"},
}

// jsNotAnswers are the types of api.ts that are no JSON body.
var jsNotAnswers = map[string]bool{"Signer": true, "UploadState": true, "RejectReason": true}

func TestJSTypesMatchOpenAPI(t *testing.T) {
	ts, err := os.ReadFile("js/src/api.ts")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range jsTypeProblems(t, string(ts), spec) {
		t.Error(p)
	}
}

// The check itself fails on a rename on either side.
func TestJSTypesCheckCatchesRenames(t *testing.T) {
	ts, _ := os.ReadFile("js/src/api.ts")
	spec, _ := os.ReadFile("openapi.yaml")
	for name, c := range map[string]struct{ ts, spec string }{
		"TS field":     {strings.Replace(string(ts), "expiresIn: number;", "expiresInSeconds: number;", 1), string(spec)},
		"schema field": {string(ts), strings.Replace(string(spec), "        maxPartsPerRequest:\n", "        maxPartNumbers:\n", 1)},
		"TS type":      {strings.Replace(string(ts), "export interface ListedPart ", "export interface HeldPart ", 1), string(spec)},
		"schema enum":  {string(ts), strings.Replace(string(spec), "enum: [pending, verifying,", "enum: [issued, verifying,", 1)},
		"field type":   {strings.Replace(string(ts), "  size: number;\n  etag: string;", "  size: string;\n  etag: string;", 1), string(spec)},
	} {
		if c.ts == string(ts) && c.spec == string(spec) {
			t.Fatalf("%s: the mutation matched nothing", name)
		}
		if p := jsTypeProblems(t, c.ts, []byte(c.spec)); len(p) == 0 {
			t.Errorf("%s renamed: no problem found", name)
		}
	}
}

// jsTypeProblems compares every answer type of api.ts with its schemas.
func jsTypeProblems(t *testing.T, ts string, spec []byte) []string {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(spec, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	c := &jsCheck{doc: doc, types: parseTS(t, ts)}
	for name := range c.types {
		if _, ok := jsSchemas[name]; !ok && !jsNotAnswers[name] {
			c.problems = append(c.problems, fmt.Sprintf("api.ts: %s has no schema in jsSchemas", name))
		}
	}
	for name, paths := range jsSchemas {
		if _, ok := c.types[name]; !ok {
			c.problems = append(c.problems, fmt.Sprintf("api.ts: no type %s", name))
			continue
		}
		var schemas []map[string]any
		for _, p := range paths {
			if s := c.schemaAt(p); s != nil {
				schemas = append(schemas, s)
			} else {
				c.problems = append(c.problems, fmt.Sprintf("openapi.yaml: no schema %s (for %s)", p, name))
			}
		}
		if len(schemas) > 0 {
			c.compare(name, name, schemas)
		}
	}
	sort.Strings(c.problems)
	return c.problems
}

type jsCheck struct {
	doc      map[string]any
	types    map[string]string // name → TS type text
	problems []string
}

// schemaAt is the schema "Name/prop/[]/prop" under components/schemas.
func (c *jsCheck) schemaAt(path string) map[string]any {
	parts := strings.Split(path, "/")
	cur := dig(c.doc, "components", "schemas", parts[0])
	for _, part := range parts[1:] {
		m, ok := c.resolve(cur).(map[string]any)
		if !ok {
			return nil
		}
		if part == "[]" {
			cur = m["items"]
		} else {
			cur = dig(m, "properties", part)
		}
	}
	m, _ := c.resolve(cur).(map[string]any)
	return m
}

// resolve follows a local $ref.
func (c *jsCheck) resolve(s any) any {
	m, ok := s.(map[string]any)
	if !ok {
		return s
	}
	if ref, ok := m["$ref"].(string); ok {
		keys := strings.Split(strings.TrimPrefix(ref, "#/"), "/")
		return c.resolve(dig(c.doc, keys...))
	}
	return s
}

func dig(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// compare checks the TS type text typ (named where, in messages) against
// schemas: an object type's every field must be a property of one of
// them, of a fitting type, and required there unless optional in TS.
func (c *jsCheck) compare(where, typ string, schemas []map[string]any) {
	typ = strings.TrimSpace(typ)
	if alias, ok := c.types[typ]; ok {
		typ = alias
	}
	switch {
	case strings.HasPrefix(typ, "{"):
		for _, f := range parseFields(typ) {
			var found []map[string]any
			required := false
			for _, s := range schemas {
				if p, ok := c.resolve(dig(s, "properties", f.name)).(map[string]any); ok {
					found = append(found, p)
					if req, _ := s["required"].([]any); slices.Contains(req, any(f.name)) {
						required = true
					}
				}
			}
			at := where + "." + f.name
			if len(found) == 0 {
				c.problems = append(c.problems, fmt.Sprintf("%s: no such property in openapi.yaml", at))
				continue
			}
			if !f.optional && !required {
				c.problems = append(c.problems, fmt.Sprintf("%s: required in api.ts, optional in openapi.yaml", at))
			}
			c.compare(at, f.typ, found)
		}
	case strings.HasSuffix(typ, "[]"):
		var items []map[string]any
		for _, s := range schemas {
			if s["type"] != "array" {
				c.problems = append(c.problems, fmt.Sprintf("%s: an array in api.ts, %v in openapi.yaml", where, s["type"]))
				return
			}
			if it, ok := c.resolve(s["items"]).(map[string]any); ok {
				items = append(items, it)
			}
		}
		c.compare(where+"[]", strings.TrimSuffix(typ, "[]"), items)
	default:
		for _, s := range schemas {
			if !scalarFits(typ, s) {
				c.problems = append(c.problems, fmt.Sprintf("%s: %s in api.ts does not fit %v in openapi.yaml", where, typ, s))
			}
		}
	}
}

// scalarFits reports whether the TS type typ (string, number, boolean,
// Record<string, string>, or a union of string literals) fits schema s.
func scalarFits(typ string, s map[string]any) bool {
	switch typ {
	case "string":
		_, isConst := s["const"].(string)
		return s["type"] == "string" || isConst
	case "number":
		return s["type"] == "integer" || s["type"] == "number"
	case "boolean":
		return s["type"] == "boolean"
	case "Record<string, string>":
		return s["type"] == "object"
	}
	allowed, _ := s["enum"].([]any)
	if cst, ok := s["const"]; ok {
		allowed = append(allowed, cst)
	}
	lits := strings.Split(typ, "|")
	for _, l := range lits {
		l = strings.TrimSpace(l)
		if len(l) < 2 || l[0] != '"' || !slices.Contains(allowed, any(strings.Trim(l, `"`))) {
			return false
		}
	}
	return len(allowed) > 0
}

type tsField struct {
	name, typ string
	optional  bool
}

var (
	tsComment = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	tsDecl    = regexp.MustCompile(`export (interface|type) (\w+)\s*(=)?\s*`)
)

// parseTS reads api.ts's exported interfaces and type aliases: name → the
// type's text ("{ ... }" for an interface). Enough TypeScript for api.ts:
// no generics of its own, no extends.
func parseTS(t *testing.T, src string) map[string]string {
	t.Helper()
	src = tsComment.ReplaceAllString(src, "")
	types := map[string]string{}
	for _, m := range tsDecl.FindAllStringSubmatchIndex(src, -1) {
		name, rest := src[m[4]:m[5]], src[m[1]:]
		var body string
		if src[m[2]:m[3]] == "interface" {
			body = rest[:matchBrace(rest)+1]
		} else {
			body, _, _ = strings.Cut(rest, ";")
		}
		types[name] = strings.TrimSpace(body)
	}
	if len(types) == 0 {
		t.Fatal("api.ts: no exported types")
	}
	return types
}

// matchBrace is the index of the brace closing the one s starts with.
func matchBrace(s string) int {
	depth := 0
	for i, r := range s {
		switch r {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return len(s) - 1
}

// parseFields splits "{ a: T; b?: { c: U }; m(x): V; }" into its property
// fields; methods are left out.
func parseFields(body string) []tsField {
	inner := strings.TrimSpace(body[1:matchBrace(body)])
	var out []tsField
	depth, start := 0, 0
	for i, r := range inner + ";" {
		switch r {
		case '{', '(', '<':
			depth++
		case '}', ')', '>':
			depth--
		case ';':
			if depth > 0 {
				continue
			}
			member := strings.TrimSpace(inner[start:min(i, len(inner))])
			start = i + 1
			member = strings.TrimPrefix(member, "readonly ")
			name, typ, ok := strings.Cut(member, ":")
			if !ok || strings.Contains(name, "(") {
				continue
			}
			name = strings.TrimSpace(name)
			opt := strings.HasSuffix(name, "?")
			out = append(out, tsField{name: strings.Trim(strings.TrimSuffix(name, "?"), `"`), typ: strings.TrimSpace(typ), optional: opt})
		}
	}
	return out
}
