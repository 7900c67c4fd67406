package powerloss

import (
	"fmt"
	"strconv"
)

// sequences follows writers that each count up, one goroutine per
// sequence (journal steps, document versions): per goroutine, where the
// state was when the run started, the last number acknowledged and the
// last attempted. Lines are "try|ack <goroutine> <op> <number>".
type sequences struct {
	what               string // what a number counts, for messages
	base, acked, tried map[int]int
}

func newSequences(what string) sequences {
	q := sequences{what: what}
	q.adopt(map[int]int{})
	return q
}

// adopt makes at the state the next run starts from.
func (q *sequences) adopt(at map[int]int) {
	q.base, q.acked, q.tried = at, map[int]int{}, map[int]int{}
}

func (q *sequences) observe(line string) error {
	kind, key, _, payload, err := parseLine(line)
	if err != nil {
		return err
	}
	g, err1 := strconv.Atoi(key)
	n, err2 := strconv.Atoi(payload)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("malformed %s line %q", q.what, line)
	}
	if kind == "ack" {
		q.acked[g] = n
	} else {
		q.tried[g] = n
	}
	return nil
}

// acks counts the acknowledged changes of the run.
func (q *sequences) acks() int {
	n := 0
	for g, a := range q.acked {
		n += a - q.base[g]
	}
	return n
}

// goroutines lists every goroutine known to q or in also, sorted.
func (q *sequences) goroutines(also map[int]int) []int {
	gs := map[int]bool{}
	for _, m := range []map[int]int{q.base, q.acked, q.tried, also} {
		for g := range m {
			gs[g] = true
		}
	}
	return sortedInts(gs)
}

// judge reports what is wrong, if anything, with goroutine g's state being
// at number got: it must be the last acknowledged (or the starting point)
// or the one attempted after it.
func (q *sequences) judge(g, got int, key string) *Violation {
	lo := max(q.base[g], q.acked[g])
	hi := lo
	if q.tried[g] == lo+1 {
		hi = lo + 1
	}
	switch {
	case got < lo:
		return &Violation{Kind: Lost, Key: key, Detail: fmt.Sprintf("found %s %d, but %s %d was acknowledged", q.what, got, q.what, lo)}
	case got > hi:
		return &Violation{Kind: Invented, Key: key, Detail: fmt.Sprintf("found %s %d, but only %ss up to %d were attempted", q.what, got, q.what, hi)}
	}
	return nil
}
