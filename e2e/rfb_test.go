package e2e

import (
	"crypto/des"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"time"

	"golang.org/x/net/websocket"
)

// rfbClient is the client side of the RFB protocol (RFC 6143), as much as a
// test needs: the 3.8 handshake with VNC authentication, a 32-bit true-colour
// pixel format, raw encoding, and one full framebuffer update.
type rfbClient struct {
	ws            *websocket.Conn
	width, height int
	name          string
}

// dialRFB connects to a hub's /vnc/{id} socket and completes the handshake.
func dialRFB(url, password string) (*rfbClient, error) {
	ws, err := websocket.Dial(url, "", "http://127.0.0.1/")
	if err != nil {
		return nil, err
	}
	ws.PayloadType = websocket.BinaryFrame
	c := &rfbClient{ws: ws}
	if err := c.handshake(password); err != nil {
		ws.Close()
		return nil, err
	}
	return c, nil
}

func (c *rfbClient) read(n int) ([]byte, error) {
	buf := make([]byte, n)
	_ = c.ws.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := io.ReadFull(c.ws, buf)
	return buf, err
}

func (c *rfbClient) handshake(password string) error {
	version, err := c.read(12)
	if err != nil {
		return fmt.Errorf("reading the server's version: %w", err)
	}
	if string(version[:4]) != "RFB " {
		return fmt.Errorf("not an RFB server: %q", version)
	}
	if _, err := c.ws.Write([]byte("RFB 003.008\n")); err != nil {
		return err
	}
	n, err := c.read(1)
	if err != nil {
		return err
	}
	if n[0] == 0 {
		return errors.New("the server refused the connection")
	}
	types, err := c.read(int(n[0]))
	if err != nil {
		return err
	}
	chosen := byte(0)
	for _, t := range types {
		if t == 2 || (t == 1 && chosen == 0) {
			chosen = t
		}
	}
	if chosen == 0 {
		return fmt.Errorf("no security type this client speaks among %v", types)
	}
	if _, err := c.ws.Write([]byte{chosen}); err != nil {
		return err
	}
	if chosen == 2 {
		challenge, err := c.read(16)
		if err != nil {
			return err
		}
		if _, err := c.ws.Write(vncAuth(password, challenge)); err != nil {
			return err
		}
	}
	result, err := c.read(4)
	if err != nil {
		return err
	}
	if binary.BigEndian.Uint32(result) != 0 {
		return errors.New("VNC authentication failed")
	}
	if _, err := c.ws.Write([]byte{1}); err != nil { // ClientInit: shared
		return err
	}
	init, err := c.read(24)
	if err != nil {
		return err
	}
	c.width, c.height = int(binary.BigEndian.Uint16(init[0:])), int(binary.BigEndian.Uint16(init[2:]))
	name, err := c.read(int(binary.BigEndian.Uint32(init[20:])))
	c.name = string(name)
	return err
}

// vncAuth answers the challenge: DES with the password (8 bytes, each byte's
// bits reversed, as VNC has always done) as the key.
func vncAuth(password string, challenge []byte) []byte {
	key := make([]byte, 8)
	copy(key, password)
	for i := range key {
		key[i] = bits.Reverse8(key[i])
	}
	block, _ := des.NewCipher(key)
	out := make([]byte, 16)
	block.Encrypt(out[:8], challenge[:8])
	block.Encrypt(out[8:], challenge[8:])
	return out
}

// frame asks for the whole screen in raw 32-bit pixels (red at bits 16-23,
// green 8-15, blue 0-7, little-endian) and returns them, row by row.
func (c *rfbClient) frame() ([]uint32, error) {
	setFormat := []byte{0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0}
	encodings := []byte{2, 0, 0, 1, 0, 0, 0, 0} // SetEncodings: raw
	request := []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(request[6:], uint16(c.width))
	binary.BigEndian.PutUint16(request[8:], uint16(c.height))
	for _, m := range [][]byte{setFormat, encodings, request} {
		if _, err := c.ws.Write(m); err != nil {
			return nil, err
		}
	}
	pixels := make([]uint32, c.width*c.height)
	for {
		head, err := c.read(1)
		if err != nil {
			return nil, err
		}
		switch head[0] {
		case 0: // FramebufferUpdate
		case 2: // Bell
			continue
		case 3: // ServerCutText
			h, err := c.read(7)
			if err != nil {
				return nil, err
			}
			if _, err := c.read(int(binary.BigEndian.Uint32(h[3:]))); err != nil {
				return nil, err
			}
			continue
		default:
			return nil, fmt.Errorf("unexpected server message %d", head[0])
		}
		h, err := c.read(3)
		if err != nil {
			return nil, err
		}
		for range int(binary.BigEndian.Uint16(h[1:])) {
			r, err := c.read(12)
			if err != nil {
				return nil, err
			}
			x, y := int(binary.BigEndian.Uint16(r[0:])), int(binary.BigEndian.Uint16(r[2:]))
			w, hh := int(binary.BigEndian.Uint16(r[4:])), int(binary.BigEndian.Uint16(r[6:]))
			if enc := int32(binary.BigEndian.Uint32(r[8:])); enc != 0 {
				return nil, fmt.Errorf("rectangle in encoding %d, asked for raw", enc)
			}
			data, err := c.read(w * hh * 4)
			if err != nil {
				return nil, err
			}
			for row := range hh {
				for col := range w {
					if y+row < c.height && x+col < c.width {
						pixels[(y+row)*c.width+x+col] = binary.LittleEndian.Uint32(data[(row*w+col)*4:])
					}
				}
			}
		}
		return pixels, nil
	}
}

func (c *rfbClient) Close() error { return c.ws.Close() }
