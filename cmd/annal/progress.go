package main

import (
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// meter shows how far a long operation is (verify --full, import, export,
// reindex, an open that indexes) on a terminal: a bar over a known total
// (or a spinner when the total is not known) with the rate and the time
// left, and, for a stretch of the work that reports no progress (an
// import's last sync and indexing, verify's check of the index), the name
// of that phase and the time it has taken, instead of a bar that stalls or
// vanishes. A maintained library draws both (progressbar handles the
// terminal width, throttling and the estimate).
//
// The bar is drawn only once the operation has run for meterDelay: a rate
// over less is noise (the first sample of a verify showed "602 GB/s", the
// bytes of a first burst over the microseconds since the bar was first
// drawn), and an operation shorter than that needs no bar. Its clock
// starts with the meter, so every rate it shows is an average over at
// least meterDelay. (A spinner, for an input of unknown size, turns from
// the start, at 0 B and with no rate until then.) Sizes are in IEC units
// (KiB, MiB, GiB), as in every table.
//
// A nil *meter draws nothing: every method may be called on one. Its
// methods may be called from several goroutines.
type meter struct {
	mu    sync.Mutex
	w     io.Writer
	total int64 // -1: not known
	start time.Time
	delay time.Duration            // meterDelay; tests shorten it
	bar   *progressbar.ProgressBar // nil once a spinner or the meter ended
	value int64                    // the last value set
	desc  string                   // the description to show
	shown string                   // the description the bar has
	phase *progressbar.ProgressBar // the phase being shown, or nil
	done  bool
}

// meterDelay is how long an operation runs before its bar is drawn, and so
// the shortest span a rate is measured over.
const meterDelay = 500 * time.Millisecond

// meterUnit says what a meter counts.
type meterUnit int

const (
	meterBytes  meterUnit = iota // bytes, shown in IEC units
	meterEvents                  // events
)

// progressTo returns where a command draws progress: w (its standard
// error) when it is a terminal, nil (nowhere) otherwise. Tests replace it.
var progressTo = func(w io.Writer) io.Writer {
	if isTerminal(w) {
		return w
	}
	return nil
}

// newMeter returns a meter that draws on w (nil: a nil meter, which draws
// nothing) the progress of desc towards total units (0 or less: not known,
// a spinner) of unit.
func newMeter(w io.Writer, desc string, total int64, unit meterUnit) *meter {
	if w == nil {
		return nil
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionSetWidth(30),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionUseIECUnits(true),
	}
	if unit == meterBytes {
		opts = append(opts, progressbar.OptionShowBytes(true))
	} else {
		opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetItsString("events"))
	}
	m := &meter{w: w, total: total, start: time.Now(), delay: meterDelay, desc: desc, shown: desc}
	if total <= 0 {
		// A spinner with the count and the rate, which the library
		// draws every 100 ms from its start, now (at 0 B: no rate).
		m.total = -1
		m.bar = progressbar.NewOptions64(-1, append(opts, progressbar.OptionSetRenderBlankState(true))...)
		return m
	}
	m.bar = progressbar.NewOptions64(total, opts...)
	// The bar's clock starts now, with the operation: every rate it
	// shows is over the whole run, and it shows none before the first
	// value, given to it after the delay (set).
	m.bar.StartWithoutRender()
	return m
}

// set records that n units are done, and moves the bar there once the
// operation has run for the delay (and no phase is shown).
func (m *meter) set(n int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.value = n
	m.draw()
}

// draw moves the bar to the value set. m.mu is held.
func (m *meter) draw() {
	if m.done || m.phase != nil || m.bar == nil || time.Since(m.start) < m.delay {
		return
	}
	n := m.value
	if m.total > 0 {
		n = min(n, m.total-1) // at its total the library ends the bar and clears it
	}
	_ = m.bar.Set64(n)
	if m.shown != m.desc {
		// After the value: the library draws on Describe too, and a
		// first frame would show 0 B.
		m.bar.Describe(m.desc)
		m.shown = m.desc
	}
}

// describe changes the bar's description (the ledger being verified), and
// ends a phase that was shown: the bar is back.
func (m *meter) describe(desc string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endPhase()
	m.desc = desc
	m.draw()
}

// showPhase shows label (such as "import: syncing and indexing") and the
// time since it began, with a spinner, in place of the bar: a stretch of
// the work that reports no progress. It lasts until describe or finish;
// set only records its value meanwhile. A phase is shown at once, delay or
// not: it shows no rate.
func (m *meter) showPhase(label string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return
	}
	m.endPhase()
	if m.total < 0 {
		// A spinner draws itself until it ends: end it, for good.
		_ = m.bar.Finish()
		m.bar = nil
	} else {
		_ = m.bar.Clear()
	}
	m.phase = progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(m.w),
		progressbar.OptionSetDescription(label+"…"),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionClearOnFinish(),
		// Drawn now, and then by the library every 100 ms until it ends.
		progressbar.OptionSetRenderBlankState(true),
	)
}

// endPhase ends the phase shown, if any, and clears it. m.mu is held.
func (m *meter) endPhase() {
	if m.phase != nil {
		_ = m.phase.Finish() // clears it; its drawing goroutine ends
		m.phase = nil
	}
}

// finish removes what the meter drew; it draws nothing after.
func (m *meter) finish() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endPhase()
	if m.bar != nil {
		_ = m.bar.Finish() // clears it (and ends a spinner's goroutine)
		m.bar = nil
	}
	m.done = true
}
