package disposition

import "testing"

func TestOf(t *testing.T) {
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	for _, tc := range []struct{ ct, name, want string }{
		{"application/pdf", "rapport été.pdf", `attachment; filename="rapport _t_.pdf"; filename*=UTF-8''rapport%20%C3%A9t%C3%A9.pdf`},
		{"image/png", "cat.png", `inline; filename="cat.png"; filename*=UTF-8''cat.png`},
		{"image/svg+xml", "x.svg", `attachment; filename="x.svg"; filename*=UTF-8''x.svg`},
		{"image/jpeg", "", `inline; filename="` + id + `.jpg"; filename*=UTF-8''` + id + `.jpg`},
		{"application/octet-stream", `..\..\etc/"pass wd"`, `attachment; filename="_pass wd_"; filename*=UTF-8''%22pass%20wd%22`},
		{"application/pdf", " . ", `attachment; filename="` + id + `.pdf"; filename*=UTF-8''` + id + `.pdf`},
		{"text/plain", "a;b=c'd.txt", `attachment; filename="a;b=c'd.txt"; filename*=UTF-8''a%3Bb%3Dc%27d.txt`},
	} {
		if got := Of(tc.ct, tc.name, id); got != tc.want {
			t.Errorf("Of(%q, %q):\n got %s\nwant %s", tc.ct, tc.name, got, tc.want)
		}
	}
}
