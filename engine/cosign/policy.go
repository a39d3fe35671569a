package cosign

import (
	"fmt"
	"strings"
	"time"
)

// Policy is what a verifier asks of a checkpoint's tlog witnesses: valid
// cosignatures by at least a quorum of a set of witnesses (NewPolicy).
type Policy struct {
	witnesses []*verifier
	quorum    int
}

// NewPolicy returns the policy of the witnesses' verifier keys (vkeys,
// as annal witness prints them) and the quorum: 0 means all of them. A
// key that is not a witness's, a key given twice (or its public key under
// another name: a cosignature/v1 does not sign the witness's name, so one
// witness's cosignature would count for both), or a quorum above the
// number of witnesses is an error.
func NewPolicy(vkeys []string, quorum int) (*Policy, error) {
	if len(vkeys) == 0 {
		return nil, fmt.Errorf("%w: a policy needs at least one witness key", ErrKey)
	}
	p := &Policy{quorum: quorum}
	seen := map[string]string{} // by public key: the vkey
	for _, k := range vkeys {
		v, err := parseVerifier(k)
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[string(v.pub)]; dup {
			if prev == k {
				return nil, fmt.Errorf("%w: witness key %s given twice", ErrKey, k)
			}
			return nil, fmt.Errorf("%w: witness keys %s and %s are one public key under two names, one witness (a cosignature/v1 does not sign the name: its cosignature would count for both)", ErrKey, prev, k)
		}
		seen[string(v.pub)] = k
		p.witnesses = append(p.witnesses, v)
	}
	switch {
	case quorum == 0:
		p.quorum = len(p.witnesses)
	case quorum < 0 || quorum > len(p.witnesses):
		return nil, fmt.Errorf("cosign: quorum %d of %d witnesses: want 1 to %d (0: all)", quorum, len(p.witnesses), len(p.witnesses))
	}
	return p, nil
}

// Quorum returns the number of witnesses whose cosignature the policy
// requires.
func (p *Policy) Quorum() int { return p.quorum }

// Cosigned is one witness's cosignature found in a checkpoint.
type Cosigned struct {
	Key  string    // the witness's verifier key
	Time time.Time // when it cosigned (UTC, in seconds)
}

// Check checks the cosignatures of the signed checkpoint msg (its log
// signature is the caller's to check): it returns the witnesses whose
// valid cosignature it carries, and an error matching ErrQuorum if they
// are fewer than the quorum, saying how many were found, which keys
// cosigned, which did not, and which lines named a witness but did not
// verify.
func (p *Policy) Check(msg []byte) ([]Cosigned, error) {
	text, sigs, err := splitNote(msg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrQuorum, err)
	}
	var found []Cosigned
	var missing, invalid []string
	for _, v := range p.witnesses {
		ok, bad := false, false
		for _, s := range sigs {
			if s.name != v.name || s.hash != v.hash {
				continue
			}
			if t, valid := cosignatureTime(v, text, s); valid && !ok {
				found = append(found, Cosigned{Key: v.vkey, Time: t})
				ok = true
			} else if !valid {
				bad = true
			}
		}
		switch {
		case ok:
		case bad:
			invalid = append(invalid, v.vkey)
		default:
			missing = append(missing, v.vkey)
		}
	}
	if len(found) >= p.quorum {
		return found, nil
	}
	var keys []string
	for _, c := range found {
		keys = append(keys, c.Key)
	}
	why := fmt.Sprintf("%d of the %d tlog witnesses given cosigned the checkpoint, the quorum is %d", len(found), len(p.witnesses), p.quorum)
	if len(keys) > 0 {
		why += "; cosigned by: " + strings.Join(keys, ", ")
	}
	if len(missing) > 0 {
		why += "; no cosignature by: " + strings.Join(missing, ", ")
	}
	if len(invalid) > 0 {
		why += "; a cosignature that does not verify (not of this checkpoint) by: " + strings.Join(invalid, ", ")
	}
	return found, fmt.Errorf("%w: %s", ErrQuorum, why)
}
