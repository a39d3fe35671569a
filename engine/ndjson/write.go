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
	days, rem := sec/86400, sec%86400
	year, month, day := civilFromDays(days)
	if year > 9999 {
		return appendTimestampSlow(dst, micros)
	}
	// One fixed-size write, two digits at a time: the export and the
	// leaf hash of every event build this (see AppendLine).
	var b [27]byte
	put2(b[0:], year/100)
	put2(b[2:], year%100)
	b[4] = '-'
	put2(b[5:], month)
	b[7] = '-'
	put2(b[8:], day)
	b[10] = 'T'
	put2(b[11:], rem/3600)
	b[13] = ':'
	put2(b[14:], rem/60%60)
	b[16] = ':'
	put2(b[17:], rem%60)
	b[19] = '.'
	put2(b[20:], us/10000)
	put2(b[22:], us/100%100)
	put2(b[24:], us%100)
	b[26] = 'Z'
	return append(dst, b[:]...)
}

// digitPairs holds "00" to "99".
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"

// put2 writes v (below 100) in two digits at b[0:2].
func put2(b []byte, v uint64) {
	b[0], b[1] = digitPairs[2*v], digitPairs[2*v+1]
}

// civilFromDays returns the date of the day days after 1970-01-01, in the
// proleptic Gregorian calendar (H. Hinnant's algorithm; the inverse of
// daysFromCivil).
func civilFromDays(days uint64) (year, month, day uint64) {
	z := days + 719468
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	day = doy - (153*mp+2)/5 + 1
	if mp < 10 {
		month = mp + 3
	} else {
		month = mp - 9
	}
	year = yoe + era*400
	if month <= 2 {
		year++
	}
	return year, month, day
}

// appendTimestampSlow is AppendTimestamp with the time package, for years
// after 9999.
func appendTimestampSlow(dst []byte, micros uint64) []byte {
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
