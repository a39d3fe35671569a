package replica

// This file lets the package build on the restore branch before the
// Writer's bodies (writer.go, built beside it) land: each refuses with
// errWriterUnbuilt. Delete it when writer.go is merged.

import (
	"context"
	"errors"

	"github.com/annal-db/annal/engine/tree"
	"github.com/annal-db/annal/segment"
)

var errWriterUnbuilt = errors.New("replica: the Writer is not built on this branch")

// writerState is the Writer's state: here only the error its methods
// return.
type writerState struct{ err error }

func (w *Writer) fail() error {
	if w.err != nil {
		return w.err
	}
	return errWriterUnbuilt
}

func open(context.Context, Config) (*Writer, Tail, error) {
	return nil, Tail{}, errWriterUnbuilt
}

func (w *Writer) take(context.Context) error         { return w.fail() }
func (w *Writer) add(segment.Span, []tree.Hash)      {}
func (w *Writer) wait(context.Context, uint64) error { return w.fail() }
func (w *Writer) checkpoint([]byte, uint64)          {}
func (w *Writer) status() Status                     { return Status{LastError: w.fail()} }
func (w *Writer) close(context.Context) error        { return w.fail() }
