// notecheck opens a signed note forge wrote and signs one for forge to open, with the Go checksum
// database's note package (golang.org/x/mod/sumdb/note), code forge did not write.
//
// Input (JSON on stdin): {"vkey", "note"} to open, {"skey", "text"} to sign.
// Output (JSON on stdout): {"opened": the text of forge's note, "signed": the note Go signed}.
//
// Run: GO111MODULE=off GOPATH=/usr/share/gocode go run notecheck.go < input.json (test/note-go.test.ts does)
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/mod/sumdb/note"
)

type input struct {
	Vkey string `json:"vkey"`
	Note string `json:"note"`
	Skey string `json:"skey"`
	Text string `json:"text"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "notecheck: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("reading the input: %v", err)
	}
	v, err := note.NewVerifier(in.Vkey)
	if err != nil {
		fail("forge's verifier key %q: %v", in.Vkey, err)
	}
	n, err := note.Open([]byte(in.Note), note.VerifierList(v))
	if err != nil {
		fail("opening forge's note: %v", err)
	}
	s, err := note.NewSigner(in.Skey)
	if err != nil {
		fail("the signer key: %v", err)
	}
	signed, err := note.Sign(&note.Note{Text: in.Text}, s)
	if err != nil {
		fail("signing: %v", err)
	}
	out, _ := json.Marshal(map[string]string{"opened": n.Text, "signed": string(signed)})
	fmt.Println(string(out))
}
