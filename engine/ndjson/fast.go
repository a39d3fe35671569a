package ndjson

import (
	"bytes"
	"unsafe"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/eventid"
)

// fieldPrefix[f] is how field f's name is written before its value in a
// compact line: `"entity":`.
var fieldPrefix = func() (t [numFields]string) {
	for f, n := range fieldNames {
		t[f] = `"` + n + `":`
	}
	return t
}()

// parseFast parses a line in the form a canonicalizer writes it (as
// AppendLine does, in any order of the seven fields): no whitespace, names
// without escapes, the eventId in hex, a timestamp fastTimestamp reads,
// meta and data already canonical (canon.ScanCanonical). It reports false
// for any other line, valid or not, which parseSlow then parses: whatever
// parseFast accepts, parseSlow accepts with the same Event. It builds no
// value tree and copies nothing: with stable set, the names are strings
// over line's bytes, and Meta and Data always point into line.
func (p *lineParser) parseFast(line []byte, ev *Event, stable bool) bool {
	if len(line) < 2 || line[0] != '{' || line[len(line)-1] != '}' {
		return false
	}
	var seen uint
	var names [3][]byte // entity, key, event: the texts, between the quotes
	i := 1
	for {
		f := fieldAt(line, i)
		if f < 0 || seen&(1<<f) != 0 {
			return false
		}
		seen |= 1 << f
		i += len(fieldPrefix[f])
		if i >= len(line) {
			return false
		}
		switch f {
		case fieldEntity, fieldKey, fieldEvent:
			if line[i] != '"' {
				return false
			}
			n, ok := canon.ScanCanonical(line[i:])
			if !ok || bytes.IndexByte(line[i+1:i+n-1], '\\') >= 0 {
				return false // an escape: the slow path decodes it
			}
			names[f-fieldEntity] = line[i+1 : i+n-1]
			i += n
		case fieldEventID:
			if len(line)-i < 34 || line[i] != '"' || line[i+33] != '"' {
				return false
			}
			id, err := eventid.ParseBytes(line[i+1 : i+33])
			if err != nil {
				return false
			}
			ev.ID = id
			i += 34
		case fieldTimestamp:
			if line[i] != '"' {
				return false
			}
			j := bytes.IndexByte(line[i+1:], '"')
			if j < 0 {
				return false
			}
			us, ok := fastTimestamp(line[i+1 : i+1+j])
			if !ok {
				return false
			}
			ev.Micros = us
			i += j + 2
		case fieldMeta, fieldData:
			if f == fieldMeta && line[i] != '{' {
				return false
			}
			n, ok := canon.ScanCanonical(line[i:])
			if !ok {
				return false
			}
			if f == fieldMeta {
				ev.Meta = line[i : i+n : i+n]
			} else {
				ev.Data = line[i : i+n : i+n]
			}
			i += n
		}
		if i >= len(line) {
			return false
		}
		if line[i] == '}' {
			if i != len(line)-1 {
				return false
			}
			break
		}
		if line[i] != ',' {
			return false
		}
		i++
	}
	if seen != 1<<numFields-1 {
		return false
	}
	if stable {
		ev.Entity, ev.Key, ev.Event = bytesString(names[0]), bytesString(names[1]), bytesString(names[2])
		return true
	}
	// One string for the three names, sliced.
	s := string(names[0]) + string(names[1]) + string(names[2])
	a, b := len(names[0]), len(names[0])+len(names[1])
	ev.Entity, ev.Key, ev.Event = s[:a], s[a:b], s[b:]
	return true
}

// fieldAt returns the field whose compact prefix (`"entity":`) starts at
// line[i], or -1.
func fieldAt(line []byte, i int) int {
	if i+2 >= len(line) || line[i] != '"' {
		return -1
	}
	var f int
	switch line[i+1] {
	case 'e':
		// entity, event, eventId
		switch {
		case hasPrefixAt(line, i, fieldPrefix[fieldEntity]):
			return fieldEntity
		case hasPrefixAt(line, i, fieldPrefix[fieldEvent]):
			return fieldEvent
		case hasPrefixAt(line, i, fieldPrefix[fieldEventID]):
			return fieldEventID
		}
		return -1
	case 'k':
		f = fieldKey
	case 't':
		f = fieldTimestamp
	case 'm':
		f = fieldMeta
	case 'd':
		f = fieldData
	default:
		return -1
	}
	if !hasPrefixAt(line, i, fieldPrefix[f]) {
		return -1
	}
	return f
}

func hasPrefixAt(line []byte, i int, prefix string) bool {
	return len(line)-i >= len(prefix) && string(line[i:i+len(prefix)]) == prefix
}

// bytesString returns b as a string without copying: b must never change.
func bytesString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// fastTimestamp reads s, a timestamp without its quotes,
// "YYYY-MM-DDTHH:MM:SS.fffZ" or "YYYY-MM-DDTHH:MM:SS.ffffffZ", to the µs
// since the Unix epoch, without time.Parse. It reports false for anything
// else (then slowTimestamp gives the error): whatever it accepts,
// slowTimestamp accepts with the same value.
func fastTimestamp(s []byte) (uint64, bool) {
	if len(s) != 24 && len(s) != 27 {
		return 0, false
	}
	if s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[19] != '.' || s[len(s)-1] != 'Z' {
		return 0, false
	}
	num := func(from, to int) (int, bool) {
		v := 0
		for _, c := range s[from:to] {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 7)
	day, ok3 := num(8, 10)
	hour, ok4 := num(11, 13)
	minute, ok5 := num(14, 16)
	sec, ok6 := num(17, 19)
	frac, ok7 := num(20, len(s)-1)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return 0, false
	}
	if year < 1970 || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return 0, false
	}
	if len(s) == 24 {
		frac *= 1000
	}
	days := daysFromCivil(year, month, day)
	return uint64(((days*24+int64(hour))*60+int64(minute))*60+int64(sec))*1_000_000 + uint64(frac), true
}

// daysIn returns the number of days of month in year (Gregorian).
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil returns the days from 1970-01-01 to the date, in the
// proleptic Gregorian calendar (H. Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400 // y >= 1969: no negative years
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}
