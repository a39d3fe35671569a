package index

// FlushState returns how many times Pebble has flushed its memtables to
// sorted tables since the index was opened, and how many sublevels its
// level 0 has (flushed tables not yet compacted into the levels below:
// Pebble compacts them once there are two). A bulk writer (an import)
// uses it to make the compaction of its first flush start while it goes
// on, rather than at the end (see Flush). Both are 0 for a closed or
// failed index.
func (x *Index) FlushState() (flushes int64, sublevels int, err error) {
	if err := x.usable(); err != nil {
		return 0, 0, err
	}
	defer x.guard("metrics", &err)
	m := x.db.Metrics()
	return m.Flush.Count, int(m.Levels[0].Sublevels), nil
}
