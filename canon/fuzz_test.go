package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzCanonicalize checks, for any input, that canon never panics and that
// whatever it accepts comes out as valid JSON that is stable under another
// canonicalization and means the same as the input. Members and Unquote
// must agree with Append on what is valid, and what ScanCanonical confirms
// must be what Append writes.
func FuzzCanonicalize(f *testing.F) {
	// The seed corpus is in testdata/fuzz/FuzzCanonicalize.
	f.Fuzz(func(t *testing.T, src []byte) {
		out, err := Append(nil, src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Offset < 0 || e.Offset > int64(len(src)) {
				t.Fatalf("Append(%q): error %v is not a *Error with an offset inside the input", src, err)
			}
			if json.Valid(src) && !errors.Is(err, ErrDuplicateKey) && !errors.Is(err, ErrLoneSurrogate) &&
				!errors.Is(err, ErrNumberOverflow) && !errors.Is(err, ErrNumberPrecision) &&
				!errors.Is(err, ErrTooDeep) && !errors.Is(err, ErrInvalidUTF8) {
				t.Fatalf("Append(%q) = %v, but encoding/json finds it valid", src, err)
			}
		} else {
			if !json.Valid(out) {
				t.Fatalf("Append(%q) = %q, not valid JSON", src, out)
			}
			again, err := Append(nil, out)
			if err != nil || !bytes.Equal(again, out) {
				t.Fatalf("Append(%q) = %q is not stable: %q, %v", src, out, again, err)
			}
			var in, back any
			if err := json.Unmarshal(src, &in); err != nil {
				t.Fatalf("Append accepted %q, encoding/json refuses it: %v", src, err)
			}
			if err := json.Unmarshal(out, &back); err != nil {
				t.Fatalf("Append(%q) = %q, which encoding/json refuses: %v", src, out, err)
			}
			if !reflect.DeepEqual(in, back) {
				t.Fatalf("Append(%q) = %q changes the value: %#v became %#v", src, out, in, back)
			}
		}

		memberErr := Members(src, func(name string, value []byte) error {
			if verr := Valid(value); verr != nil {
				t.Fatalf("Members(%q) gave member %q the invalid value %q: %v", src, name, value, verr)
			}
			return nil
		})
		switch {
		case errors.Is(err, ErrTooDeep) && (memberErr == nil || errors.Is(memberErr, ErrTooDeep)):
			// Members gives the values one level more than Append
			// gives the whole object (see Members).
		case err != nil && (memberErr == nil || memberErr.Error() != err.Error()):
			t.Fatalf("Members(%q) = %v, Append gave %v", src, memberErr, err)
		case err == nil && (memberErr == nil) != (out[0] == '{'):
			t.Fatalf("Members(%q) = %v for canonical form %q", src, memberErr, out)
		}

		if n, ok := ScanCanonical(src); ok {
			got, cerr := Append(nil, src[:n])
			if cerr != nil || !bytes.Equal(got, src[:n]) {
				t.Fatalf("ScanCanonical(%q) confirms %q as canonical, Append gives %q, %v", src, src[:n], got, cerr)
			}
		}

		text, uerr := Unquote(nil, src)
		if uerr == nil {
			if err != nil || out[0] != '"' {
				t.Fatalf("Unquote accepts %q, Append gives %q, %v", src, out, err)
			}
			if lit := AppendString(nil, string(text)); !bytes.Equal(lit, out) {
				t.Fatalf("Unquote(%q) = %q, AppendString of that is %q, Append gave %q", src, text, lit, out)
			}
		}
	})
}
