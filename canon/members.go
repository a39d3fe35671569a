package canon

import "bytes"

// Members calls fn for each member of the JSON object src, in input order,
// with the member's decoded name and its value exactly as it stands in src
// (a subslice without surrounding whitespace, not canonicalized). It first
// checks the whole of src by canon's rules, so fn is not called at all for
// input that Append would reject; the errors and their offsets are the
// same. One exception: the object itself takes no level of MaxDepth, so
// that each value may be nested as deep as Append accepts it on its own
// (an NDJSON line is an object holding an event's meta and data). If src
// is valid but not an object, the error wraps ErrNotObject. If fn returns
// an error, Members stops and returns it.
func Members(src []byte, fn func(name string, value []byte) error) error {
	c := getCanonicalizer()
	defer putCanonicalizer(c)
	c.recordTop = true
	var err error
	c.out, err = c.AppendObject(c.out[:0], src)
	c.recordTop = false
	if err != nil {
		return err
	}
	// fn may call Members again, which takes another Canonicalizer from the
	// pool, so c's state is safe until this loop ends.
	for _, m := range c.top {
		key := src[m.keyStart+1 : m.keyEnd-1]
		var name string
		if bytes.IndexByte(key, '\\') < 0 {
			name = string(key)
		} else {
			c.tmp, _, _ = appendUnquoted(c.tmp[:0], src, m.keyStart)
			name = string(c.tmp)
		}
		if err := fn(name, src[m.valueStart:m.valueEnd]); err != nil {
			return err
		}
	}
	return nil
}
