package report

import "errors"

// ErrNothingToChart is returned by Chart and ChartPNG when no summary has
// a ratio of annal to a peer.
var ErrNothingToChart = errors.New("report: nothing to chart: no ratio of annal to a peer")
