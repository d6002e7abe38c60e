package auth

import (
	"strings"
	"testing"
)

// FuzzParse: any htpasswd file loads or is refused; a loaded one has only
// non-empty users with bcrypt hashes.
func FuzzParse(f *testing.F) {
	f.Add([]byte("alice:$2y$05$0123456789012345678901uJZrj7kDb3nZ1y3cR1G9C3pE5Yfx5qa\n# c\n\n"))
	f.Add([]byte("a:{SHA}x\n"))
	f.Add([]byte(":\n"))
	f.Add([]byte(strings.Repeat("x", 5000)))
	f.Fuzz(func(t *testing.T, data []byte) {
		users, err := Parse(data)
		if err != nil {
			return
		}
		for u, h := range users {
			if u == "" || !strings.HasPrefix(string(h), "$2") {
				t.Fatalf("accepted user %q with hash %q", u, h)
			}
		}
	})
}
