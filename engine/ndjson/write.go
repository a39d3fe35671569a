package ndjson

import (
	"time"

	"github.com/annal-db/annal/canon"
	"github.com/annal-db/annal/eventid"
)

// AppendLine appends one event to dst as one line of the Evently download
// format, "\n" included, and returns the extended slice:
//
//	{"entity":…,"key":…,"event":…,"eventId":…,"timestamp":…,"meta":{…},"data":…}
//
// The members are in that order; entity, key and event are written as
// JSON.stringify writes a string ([canon.AppendString]); eventId is id in
// 32 lower-case hex digits; the timestamp is micros in ISO-8601 UTC with
// 6 fraction digits (see [AppendTimestamp]); meta and data must already be
// canonical JSON (as [Reader] returns them and the engine stores them) and
// are copied as they are.
//
// It allocates nothing when dst has room for the line.
//
// A Reader reading the line back gives the same event. The line is the
// one Evently wrote for the event except where Evently wrote 3 fraction
// digits (annal always writes 6) or meta or data in another spelling
// (annal writes their canonical form, the bytes the ID covers).
func AppendLine(dst []byte, id eventid.ID, micros uint64, entity, key, event string, meta, data []byte) []byte {
	dst = append(dst, `{"entity":`...)
	dst = canon.AppendString(dst, entity)
	dst = append(dst, `,"key":`...)
	dst = canon.AppendString(dst, key)
	dst = append(dst, `,"event":`...)
	dst = canon.AppendString(dst, event)
	dst = append(dst, `,"eventId":"`...)
	dst = id.AppendHex(dst)
	dst = append(dst, `","timestamp":"`...)
	dst = AppendTimestamp(dst, micros)
	dst = append(dst, `","meta":`...)
	dst = append(dst, meta...)
	dst = append(dst, `,"data":`...)
	dst = append(dst, data...)
	return append(dst, "}\n"...)
}

// AppendEvent appends e as one line; see [AppendLine].
func AppendEvent(dst []byte, e *Event) []byte {
	return AppendLine(dst, e.ID, e.Micros, e.Entity, e.Key, e.Event, e.Meta, e.Data)
}

// AppendTimestamp appends micros (microseconds since the Unix epoch) in
// the form of the timestamp field, without quotes:
// "2022-01-14T02:05:17.275209Z", always with 6 fraction digits. Years after
// 9999 (from 253402300800000000 µs on) are written with as many digits as
// they have, which is not ISO-8601 and which a Reader refuses.
func AppendTimestamp(dst []byte, micros uint64) []byte {
	sec, us := micros/1_000_000, micros%1_000_000
	// time.Unix takes an int64 of seconds: every uint64 of microseconds
	// divided by 10^6 fits.
	t := time.Unix(int64(sec), 0).UTC()
	year, month, day := t.Date()
	hour, minute, second := t.Clock()
	if year > 9999 {
		dst = appendInt(dst, uint64(year))
	} else {
		dst = appendDigits(dst, uint64(year), 4)
	}
	dst = append(dst, '-')
	dst = appendDigits(dst, uint64(month), 2)
	dst = append(dst, '-')
	dst = appendDigits(dst, uint64(day), 2)
	dst = append(dst, 'T')
	dst = appendDigits(dst, uint64(hour), 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, uint64(minute), 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, uint64(second), 2)
	dst = append(dst, '.')
	dst = appendDigits(dst, us, 6)
	return append(dst, 'Z')
}

// appendDigits appends the n low decimal digits of v, zero-padded.
func appendDigits(dst []byte, v uint64, n int) []byte {
	var b [20]byte
	for i := n - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, b[:n]...)
}

// appendInt appends v in decimal.
func appendInt(dst []byte, v uint64) []byte {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		if v /= 10; v == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}
