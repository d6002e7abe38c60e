//go:build !linux

package hangup

import "net"

type instance struct{}

func (w *Watcher) watch(net.Conn, func(), bool) (func(), bool) { return nil, false }
