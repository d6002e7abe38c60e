//go:build !linux

package egress

import "errors"

// AttachedNetworks is Linux's only: sandboxes need Linux namespaces.
func AttachedNetworks() ([]Network, error) {
	return nil, errors.New("the host's bridge networks are known on Linux only")
}
