// Package disposition writes the Content-Disposition a download grant pins
// (RFC 6266): inline for raster images, attachment for everything else,
// with the uploader's filename sanitised, as an RFC 8187 filename* (UTF-8,
// percent-encoded)
// and an ASCII fallback filename="…", or <urlId>.<ext> when it gave none.
package disposition

import (
	"strings"
	"unicode"
)

// Of is the Content-Disposition of a download of an upload urlID of
// contentType, named filename by its uploader ("" for none).
func Of(contentType, filename, urlID string) string {
	kind := "attachment"
	// SVG is an image that runs script when a browser renders it as a
	// page: only raster images are shown inline.
	if strings.HasPrefix(contentType, "image/") && !strings.HasPrefix(contentType, "image/svg") {
		kind = "inline"
	}
	name := Sanitise(filename)
	if name == "" {
		name = urlID + "." + Ext(contentType)
	}
	return kind + `; filename="` + asciiFallback(name) + `"; filename*=UTF-8''` + encode(name)
}

// Sanitise is filename as a download may name it: its last path element
// (after any / or \), without control characters, without leading or
// trailing dots and spaces; "" when nothing is left.
func Sanitise(filename string) string {
	if i := strings.LastIndexAny(filename, `/\`); i >= 0 {
		filename = filename[i+1:]
	}
	filename = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return -1
		}
		return r
	}, filename)
	return strings.Trim(filename, ". ")
}

// asciiFallback is name for clients that do not read filename*: every
// byte that is not printable ASCII, and the quote and backslash a quoted
// string would need escaped, as '_'.
func asciiFallback(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			b.WriteByte('_')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// encode is name as an RFC 8187 ext-value's value-chars: attr-char as it
// is, every other byte of its UTF-8 as %XX.
func encode(name string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if attrChar(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// attrChar is RFC 8187's attr-char: ALPHA, DIGIT and !#$&+-.^_`|~.
func attrChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$&+-.^_`|~", c) >= 0
}

// exts are the extensions of the types a download names by its urlId.
var exts = map[string]string{
	"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp", "image/avif": "avif",
	"image/svg+xml": "svg", "application/pdf": "pdf", "text/plain": "txt", "text/csv": "csv",
	"application/json": "json", "application/zip": "zip", "video/mp4": "mp4", "audio/mpeg": "mp3",
}

// Ext is the file extension of contentType; "bin" for one not known.
func Ext(contentType string) string {
	base, _, _ := strings.Cut(contentType, ";")
	if e, ok := exts[strings.TrimSpace(strings.ToLower(base))]; ok {
		return e
	}
	return "bin"
}
