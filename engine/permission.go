package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// permissionHint returns what to add to an error that is a permission
// error on a file of the data directory dir (or "" if err is not one):
// the file's owner, this process's user, and the cure, chown -R USER DIR.
// A directory left to root by a `sudo annal …` gave "permission denied" on
// a file of the index and named neither.
func permissionHint(dir string, err error) string {
	if !errors.Is(err, fs.ErrPermission) {
		return ""
	}
	path := dir
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != "" {
		path = pe.Path
	}
	// The file, or the nearest directory above it that exists.
	uid, ok := -1, false
	for p := path; ; p = filepath.Dir(p) {
		if uid, ok = fileOwner(p); ok {
			path = p
			break
		}
		if filepath.Dir(p) == p {
			break
		}
	}
	me := os.Geteuid()
	if !ok || me < 0 {
		return fmt.Sprintf(" (this process may not use %s: the data directory and every file in it must belong to the user that runs annal: chown -R USER %s)", path, dir)
	}
	if uid == me {
		return fmt.Sprintf(" (%s belongs to %s, who runs annal, but its mode forbids it: chmod u+rwX %s, or chmod -R u+rwX %s)", path, userName(uid), path, dir)
	}
	return fmt.Sprintf(" (%s belongs to user %s, and annal runs as %s: give the data directory back to the user that runs annal, chown -R %s %s)",
		path, userName(uid), userName(me), userArg(me), dir)
}

// userName is "name (uid N)", or "uid N" if the name is not known.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// userArg is the user for chown: its name, or its uid.
func userArg(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" && !strings.ContainsAny(u.Username, " \t'\"") {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// withPermissionHint adds permissionHint to err (nil stays nil).
func withPermissionHint(dir string, err error) error {
	if h := permissionHint(dir, err); h != "" {
		return fmt.Errorf("%w%s", err, h)
	}
	return err
}
