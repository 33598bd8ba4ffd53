package receipt

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tombstoneworks/communitydeletion/internal/docsnippet"
)

// docs/receipts.md publishes the golden receipt as its test vector: the
// wrapped body unwraps to exactly the bytes TestCanonicalGolden produces,
// and the hash, public key, key id and signature it lists are that
// receipt's. A change of the encoding that forgets the page fails here.
func TestTheDocsTestVectorIsTheGoldenReceipt(t *testing.T) {
	const page = "../docs/receipts.md"
	blocks, err := docsnippet.Parse(page)
	if err != nil {
		t.Fatal(err)
	}
	var vector []docsnippet.Block
	for _, b := range blocks {
		if b.Section == "Test vector" {
			vector = append(vector, b)
		}
	}
	if len(vector) != 2 {
		t.Fatalf("%s: want the body and the public key under \"## Test vector\", got %d blocks", page, len(vector))
	}
	body := strings.ReplaceAll(strings.TrimSuffix(vector[0].Text, "\n"), "⏎\n", "")
	body = strings.ReplaceAll(body, "{U+2028}", "\u2028")
	if body != goldenV2Body {
		t.Fatalf("%s: the body differs from goldenV2Body:\n got %s\nwant %s", vector[0], body, goldenV2Body)
	}
	if vector[1].Text != goldenPublicKey {
		t.Fatalf("%s: the public key differs:\n%s", vector[1], vector[1].Text)
	}
	pub, err := ParsePublicKey([]byte(goldenPublicKey))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Test vector\n")
	for _, want := range []string{
		"one line of " + strconv.Itoa(len(goldenV2Body)) + " bytes",
		"SHA-256 of the body (its hash): `" + goldenV2Hash + "`",
		"Key id: `" + KeyID(pub) + "`",
		"Signature: `" + goldenV2Signature + "`",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("%s: the test vector does not say %q", page, want)
		}
	}
}
