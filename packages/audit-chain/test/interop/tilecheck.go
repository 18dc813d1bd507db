// tilecheck reads the tiles forge wrote (C2SP tlog-tiles: tile/<L>/<N>[.p/<W>]) with the Go
// checksum database's tlog package, code forge did not write: it computes every tile of the tree
// itself from the same leaf hashes and compares each with forge's file byte for byte, then reads
// the tree through tlog.TileHashReader, which checks every tile it reads against the tree head,
// and proves records and the tree's prefixes from them.
//
// Input (JSON on stdin): {"dir", "leaves": [hex…], "size", "root": hex}.
// Run: GO111MODULE=off GOPATH=/usr/share/gocode go run tilecheck.go < input.json (test/tiles-go.test.ts does)
package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

type input struct {
	Dir    string   `json:"dir"`
	Leaves []string `json:"leaves"`
	Size   int64    `json:"size"`
	Root   string   `json:"root"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "tilecheck: "+format+"\n", args...)
	os.Exit(1)
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

// files reads forge's tiles: Go names them tile/8/L/N, C2SP (and forge) tile/L/N.
type files struct{ dir string }

func (f files) Height() int { return 8 }

func (f files) path(t tlog.Tile) string {
	return filepath.Join(f.dir, "tile", strings.TrimPrefix(t.Path(), "tile/8/"))
}

func (f files) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		b, err := os.ReadFile(f.path(t))
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func (f files) SaveTiles(tiles []tlog.Tile, data [][]byte) {}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("reading the input: %v", err)
	}
	var stored []tlog.Hash
	own := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			out[i] = stored[x]
		}
		return out, nil
	})
	for i := int64(0); i < in.Size; i++ {
		more, err := tlog.StoredHashesForRecordHash(i, hash(in.Leaves[i]), own)
		if err != nil {
			fail("storing leaf %d: %v", i, err)
		}
		stored = append(stored, more...)
	}
	fs := files{in.Dir}
	// The tiles of a tree of this size: every full tile, and each level's partial one at this
	// size (a log writes a partial tile for each size it publishes).
	var tiles []tlog.Tile
	for level := 0; in.Size>>(8*uint(level)) > 0; level++ {
		n := in.Size >> (8 * uint(level))
		for i := int64(0); i < n>>8; i++ {
			tiles = append(tiles, tlog.Tile{H: 8, L: level, N: i, W: 256})
		}
		if w := int(n & 255); w > 0 {
			tiles = append(tiles, tlog.Tile{H: 8, L: level, N: n >> 8, W: w})
		}
	}
	for _, t := range tiles {
		want, err := tlog.ReadTileData(t, own)
		if err != nil {
			fail("tile %s: %v", t.Path(), err)
		}
		got, err := os.ReadFile(fs.path(t))
		if err != nil {
			fail("forge's tile for %s: %v", t.Path(), err)
		}
		if string(got) != string(want) {
			fail("forge's tile for %s differs from tlog's", t.Path())
		}
	}
	tree := tlog.Tree{N: in.Size, Hash: hash(in.Root)}
	hr := tlog.TileHashReader(tree, fs)
	th, err := tlog.TreeHash(in.Size, hr)
	if err != nil {
		fail("the tree head from forge's tiles: %v", err)
	}
	if th != tree.Hash {
		fail("the tree head from forge's tiles is %s, forge says %s", th, tree.Hash)
	}
	proofs := 0
	for _, i := range []int64{0, in.Size / 3, in.Size / 2, in.Size - 1} {
		p, err := tlog.ProveRecord(in.Size, i, hr)
		if err != nil {
			fail("proving leaf %d from forge's tiles: %v", i, err)
		}
		if err := tlog.CheckRecord(p, in.Size, th, i, hash(in.Leaves[i])); err != nil {
			fail("leaf %d: %v", i, err)
		}
		proofs++
	}
	fmt.Printf("ok: %d tiles, %d proofs\n", len(tiles), proofs)
}
