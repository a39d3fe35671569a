package store

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Memory is an in-memory Store with the semantics of S3's conditional
// writes, for unit tests. Its ETags are the quoted MD5 of the data, as S3
// gives for objects written in one part. The zero Memory is empty and
// ready.
type Memory struct {
	mu      sync.Mutex
	objects map[string]Object
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{} }

var _ Store = (*Memory)(nil)

// Put implements Store.
func (m *Memory) Put(ctx context.Context, key string, data []byte, cond Condition) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if want, ok := knownSHA256(ctx); ok && sha256.Sum256(data) != want {
		return "", fmt.Errorf("put %q: the data's SHA-256 is not the %x given (WithSHA256)", key, want)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, exists := m.objects[key]
	if cond.IfNoneMatch && exists {
		return "", fmt.Errorf("put %q if none match: %w", key, ErrPreconditionFailed)
	}
	if cond.IfMatch != "" && (!exists || old.ETag != cond.IfMatch) {
		return "", fmt.Errorf("put %q if match %s: %w", key, cond.IfMatch, ErrPreconditionFailed)
	}
	sum := md5.Sum(data)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	if m.objects == nil {
		m.objects = make(map[string]Object)
	}
	m.objects[key] = Object{Data: append([]byte(nil), data...), ETag: etag}
	return etag, nil
}

// Get implements Store.
func (m *Memory) Get(ctx context.Context, key string) (Object, error) {
	if err := ctx.Err(); err != nil {
		return Object{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if !ok {
		return Object{}, fmt.Errorf("get %q: %w", key, ErrNotFound)
	}
	return Object{Data: append([]byte(nil), o.Data...), ETag: o.ETag}, nil
}

// Head implements Store.
func (m *Memory) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if !ok {
		return ObjectInfo{}, fmt.Errorf("head %q: %w", key, ErrNotFound)
	}
	return ObjectInfo{Key: key, Size: int64(len(o.Data)), ETag: o.ETag}, nil
}

// List implements Store.
func (m *Memory) List(ctx context.Context, prefix, startAfter string, limit int) (Page, error) {
	if err := ctx.Err(); err != nil {
		return Page{}, err
	}
	limit = pageSize(limit)
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.objects {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var p Page
	if len(keys) > limit {
		keys, p.Truncated = keys[:limit], true
	}
	for _, k := range keys {
		o := m.objects[k]
		p.Objects = append(p.Objects, ObjectInfo{Key: k, Size: int64(len(o.Data)), ETag: o.ETag})
	}
	return p, nil
}

// Folders implements Store.
func (m *Memory) Folders(ctx context.Context, prefix, startAfter string, limit int) (FolderPage, error) {
	if err := ctx.Err(); err != nil {
		return FolderPage{}, err
	}
	limit = pageSize(limit)
	after := afterFolder(startAfter)
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	var folders []string
	for k := range m.objects {
		if !strings.HasPrefix(k, prefix) || k <= after {
			continue
		}
		i := strings.IndexByte(k[len(prefix):], '/')
		if i < 0 {
			continue
		}
		if f := k[:len(prefix)+i+1]; !seen[f] {
			seen[f] = true
			folders = append(folders, f)
		}
	}
	sort.Strings(folders)
	var p FolderPage
	if len(folders) > limit {
		folders, p.Truncated = folders[:limit], true
	}
	p.Folders = folders
	return p, nil
}

// Delete implements Store.
func (m *Memory) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, key)
	return nil
}

// maxListPage is S3's largest page of ListObjectsV2.
const maxListPage = 1000

// pageSize is the page of a List or Folders asked for limit: S3's
// largest when limit is <= 0 or larger.
func pageSize(limit int) int {
	if limit <= 0 || limit > maxListPage {
		return maxListPage
	}
	return limit
}

// checkKey refuses keys that S3 would refuse or change.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("store: empty key")
	}
	if len(key) > 1024 {
		return fmt.Errorf("store: key %.40q... is %d bytes, longer than 1024", key, len(key))
	}
	return nil
}
