package locks

import (
	"cmp"
	"slices"
	"time"
)

// Diff returns the changes that make the locks in force at now in have
// (a Set's List) into those in want (the Store's List): a set for every
// lock of want that have lacks or holds differently, a remove for every
// lock of have that want lacks. The proxy uses it to pick up changes made
// to its store by someone else, such as the break-glass `limen unlock
// --local` on the proxy host. Changes are ordered by target.
func Diff(have, want []Lock, now time.Time) []Change {
	cur := make(map[Target]Lock, len(have))
	for _, l := range have {
		if l.Active(now) {
			cur[l.Target] = l
		}
	}
	var out []Change
	for _, l := range want {
		if !l.Active(now) {
			continue
		}
		if c, ok := cur[l.Target]; !ok || !c.same(l) {
			out = append(out, Change{Op: OpSet, Lock: l})
		}
		delete(cur, l.Target)
	}
	for _, l := range cur {
		out = append(out, Change{Op: OpRemove, Lock: Lock{Target: l.Target}})
	}
	slices.SortFunc(out, func(a, b Change) int {
		return cmp.Or(cmp.Compare(a.Lock.Target.Kind, b.Lock.Target.Kind), cmp.Compare(a.Lock.Target.Name, b.Lock.Target.Name))
	})
	return out
}

// same compares two locks on the same target; times compare as instants,
// since a stored lock comes back in UTC with no monotonic reading.
func (l Lock) same(o Lock) bool {
	return l.Target == o.Target && l.Reason == o.Reason && l.CreatedBy == o.CreatedBy &&
		l.CreatedAt.Equal(o.CreatedAt) && l.Expires.Equal(o.Expires)
}
