package faultfs

import "errors"

// ErrInjected is matched (errors.Is) by every error that faultfs injects, in
// addition to the syscall.Errno of the fault (see [Fault]).
var ErrInjected = errors.New("faultfs: injected fault")
