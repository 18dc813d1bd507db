// tlogcheck reads forge's Merkle tree heads and proofs as JSON on stdin and checks them with the
// Go checksum database's tlog package (golang.org/x/mod/sumdb/tlog), code forge did not write:
// it builds its own tree over the same leaf hashes, compares every tree head and proof with
// forge's byte for byte, and verifies forge's proofs with CheckRecord and CheckTree.
//
// Run: GO111MODULE=off GOPATH=/usr/share/gocode go run tlogcheck.go < checks.json (test/merkle-go.test.ts does)
package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/mod/sumdb/tlog"
)

type inclusion struct {
	Index int64    `json:"index"`
	Proof []string `json:"proof"`
}

type consistency struct {
	First     int64    `json:"first"`
	FirstRoot string   `json:"firstRoot"`
	Proof     []string `json:"proof"`
}

type check struct {
	Size        int64         `json:"size"`
	Root        string        `json:"root"`
	Inclusion   []inclusion   `json:"inclusion"`
	Consistency []consistency `json:"consistency"`
}

type input struct {
	Leaves []string `json:"leaves"`
	Checks []check  `json:"checks"`
}

func hash(s string) tlog.Hash {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != tlog.HashSize {
		fail("not a hash: %q", s)
	}
	var h tlog.Hash
	copy(h[:], b)
	return h
}

func hashes(ss []string) []tlog.Hash {
	out := make([]tlog.Hash, len(ss))
	for i, s := range ss {
		out[i] = hash(s)
	}
	return out
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "tlogcheck: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("reading the input: %v", err)
	}
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			out[i] = stored[x]
		}
		return out, nil
	})
	for i, l := range in.Leaves {
		more, err := tlog.StoredHashesForRecordHash(int64(i), hash(l), reader)
		if err != nil {
			fail("storing leaf %d: %v", i, err)
		}
		stored = append(stored, more...)
	}
	n := 0
	for _, c := range in.Checks {
		th, err := tlog.TreeHash(c.Size, reader)
		if err != nil {
			fail("tree hash of %d: %v", c.Size, err)
		}
		if th != hash(c.Root) {
			fail("tree of %d: forge's head %s, tlog's %s", c.Size, c.Root, th)
		}
		for _, p := range c.Inclusion {
			proof := tlog.RecordProof(hashes(p.Proof))
			if err := tlog.CheckRecord(proof, c.Size, th, p.Index, hash(in.Leaves[p.Index])); err != nil {
				fail("leaf %d in %d: forge's proof does not check: %v", p.Index, c.Size, err)
			}
			own, err := tlog.ProveRecord(c.Size, p.Index, reader)
			if err != nil {
				fail("proving leaf %d in %d: %v", p.Index, c.Size, err)
			}
			if fmt.Sprint(own) != fmt.Sprint(proof) {
				fail("leaf %d in %d: forge's proof differs from tlog's", p.Index, c.Size)
			}
			n++
		}
		for _, p := range c.Consistency {
			proof := tlog.TreeProof(hashes(p.Proof))
			if err := tlog.CheckTree(proof, c.Size, th, p.First, hash(p.FirstRoot)); err != nil {
				fail("%d → %d: forge's proof does not check: %v", p.First, c.Size, err)
			}
			own, err := tlog.ProveTree(c.Size, p.First, reader)
			if err != nil {
				fail("proving %d → %d: %v", p.First, c.Size, err)
			}
			if fmt.Sprint(own) != fmt.Sprint(proof) {
				fail("%d → %d: forge's proof differs from tlog's", p.First, c.Size)
			}
			n++
		}
	}
	fmt.Printf("ok: %d tree heads, %d proofs\n", len(in.Checks), n)
}
