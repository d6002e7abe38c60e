package main

import (
	"net"
	"testing"
)

// Only loopback and the listed addresses get through -allow; nothing listed
// lets anyone in (Selenoid's images, and this one under Selenoid).
func TestAllowedAddresses(t *testing.T) {
	ips, err := parseAllow("172.20.0.1, 10.0.0.7")
	if err != nil {
		t.Fatal(err)
	}
	a := allowed{ips: ips}
	for addr, want := range map[string]bool{
		"172.20.0.1": true, "10.0.0.7": true, "127.0.0.1": true, "::1": true,
		"172.20.0.3": false, "10.0.0.8": false,
	} {
		if got := a.permits(&net.TCPAddr{IP: net.ParseIP(addr), Port: 40000}); got != want {
			t.Errorf("%s: permitted %v, want %v", addr, got, want)
		}
	}
	if !(allowed{}).permits(&net.TCPAddr{IP: net.ParseIP("172.20.0.3")}) {
		t.Error("no -allow must let anyone in")
	}
	if _, err := parseAllow("172.20.0.1,evil"); err == nil {
		t.Error("a name in -allow must be refused")
	}
}
