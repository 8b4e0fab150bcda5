package fleetapi

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// plainJSONString, the walk's fast path for string fields, gives exactly
// what json.Unmarshal gives whenever it answers, and leaves every literal
// with an escape, a control character or a byte outside ASCII to it.
func TestPlainJSONStringAgreesWithTheDecoder(t *testing.T) {
	cases := []string{`""`, `"abc"`, `"a b/c:d"`, `"a\"b"`, `"a\\b"`, `"\u00e9"`, `"é"`, "\"a\tb\"", `"a\nb"`, `"\ud800"`, `"x`, `x"`, `"`, `"~label-1"`, `"2026-11-20T10:00:00Z"`}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab\"\\/ \t\x01\xc3\xa9\x7f{}0")
	for range 5000 {
		b := []byte{'"'}
		for range r.IntN(8) {
			b = append(b, alphabet[r.IntN(len(alphabet))])
		}
		cases = append(cases, string(append(b, '"')))
	}
	plain := 0
	for _, c := range cases {
		got, ok := plainJSONString([]byte(c))
		if !ok {
			continue
		}
		plain++
		var want string
		if err := json.Unmarshal([]byte(c), &want); err != nil || got != want {
			t.Fatalf("plainJSONString(%q) = %q; json.Unmarshal gives %q, %v", c, got, want, err)
		}
	}
	if plain < 100 {
		t.Fatalf("only %d of %d literals took the fast path", plain, len(cases))
	}
	for _, c := range []string{`"a\"b"`, `"\u00e9"`, `"é"`, "\"a\tb\"", `"x`} {
		if _, ok := plainJSONString([]byte(c)); ok {
			t.Fatalf("plainJSONString(%q) answered; only the decoder may", c)
		}
	}
}
