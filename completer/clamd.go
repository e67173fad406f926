package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// clamd is a client of ClamAV's daemon: PING and INSTREAM over its TCP or
// Unix socket, one connection per command (clamd closes it after the
// reply). Every read and write has a deadline: a clamd that does not
// answer is an outage (errScanner), never a verdict.
type clamd struct {
	network, addr string
	// timeout bounds the dial and each read or write: a stream makes
	// progress or fails within it, however large the object.
	timeout time.Duration
}

// errScanner wraps every failure to get a verdict from clamd: the upload
// is held (neither completed nor rejected) until clamd answers again.
var errScanner = errors.New("clamd unavailable")

// clamdChunk is the size of one INSTREAM chunk.
const clamdChunk = 64 << 10

// clamdNetwork splits MINTGATE_CLAMD_ADDR: unix:/path or host:port.
func clamdNetwork(a string) (network, addr string, err error) {
	if p, ok := strings.CutPrefix(a, "unix:"); ok {
		if p == "" {
			return "", "", errors.New("unix: needs a socket path, as in unix:/run/clamav/clamd.ctl")
		}
		return "unix", p, nil
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		return "", "", fmt.Errorf("%q is neither host:port nor unix:/path", a)
	}
	return "tcp", a, nil
}

func newClamd(a string, timeout time.Duration) (*clamd, error) {
	network, addr, err := clamdNetwork(a)
	if err != nil {
		return nil, err
	}
	return &clamd{network: network, addr: addr, timeout: timeout}, nil
}

// Ping is /readyz's check: clamd answers PONG.
func (c *clamd) Ping(ctx context.Context) error {
	reply, err := c.command(ctx, "zPING\x00", nil)
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("%w: PING answered %q", errScanner, reply)
	}
	return nil
}

// Scan streams r to clamd (INSTREAM: 4-byte big-endian chunk lengths, a
// zero-length chunk to end) and reports the signature it found, "" for
// none. It never holds more than one chunk: the object streams from S3 to
// clamd. An error (errScanner) means no verdict.
func (c *clamd) Scan(ctx context.Context, r io.Reader) (found string, err error) {
	reply, err := c.command(ctx, "zINSTREAM\x00", r)
	if err != nil {
		return "", err
	}
	// "stream: OK", "stream: <signature> FOUND", "<message> ERROR".
	switch {
	case strings.HasSuffix(reply, " FOUND"):
		return strings.TrimSuffix(strings.TrimPrefix(reply, "stream: "), " FOUND"), nil
	case strings.HasSuffix(reply, ": OK"):
		return "", nil
	}
	// Such as "INSTREAM size limit exceeded. ERROR": clamd's
	// StreamMaxLength is below MINTGATE_SCAN_MAX_BYTES.
	return "", fmt.Errorf("%w: INSTREAM answered %q", errScanner, reply)
}

// command sends cmd (and, for INSTREAM, body in chunks) on a connection of
// its own and reads the NUL-terminated reply.
func (c *clamd) command(ctx context.Context, cmd string, body io.Reader) (string, error) {
	d := net.Dialer{Timeout: c.timeout}
	conn, err := d.DialContext(ctx, c.network, c.addr)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errScanner, err)
	}
	defer conn.Close()
	// A cancelled ctx ends a stream in progress too.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	w := &deadlineConn{Conn: conn, ctx: ctx, timeout: c.timeout}
	if _, err := io.WriteString(w, cmd); err != nil {
		return "", fmt.Errorf("%w: %w", errScanner, err)
	}
	if body != nil {
		if err := c.stream(w, body); err != nil {
			// clamd may have answered already (a size limit): say what.
			if reply, rerr := readReply(w); rerr == nil {
				return "", fmt.Errorf("%w: INSTREAM answered %q: %w", errScanner, reply, err)
			}
			return "", err
		}
	}
	reply, err := readReply(w)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errScanner, err)
	}
	return reply, nil
}

// stream writes body as INSTREAM chunks and the zero-length chunk that
// ends it. An error reading body is the caller's store (S3), not clamd.
func (c *clamd) stream(w io.Writer, body io.Reader) error {
	buf := make([]byte, 4+clamdChunk)
	for {
		n, rerr := io.ReadFull(body, buf[4:])
		if n > 0 {
			binary.BigEndian.PutUint32(buf[:4], uint32(n))
			if _, err := w.Write(buf[:4+n]); err != nil {
				return fmt.Errorf("%w: %w", errScanner, err)
			}
		}
		switch {
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			if _, err := w.Write([]byte{0, 0, 0, 0}); err != nil {
				return fmt.Errorf("%w: %w", errScanner, err)
			}
			return nil
		case rerr != nil:
			return fmt.Errorf("read the object: %w", rerr)
		}
	}
}

// readReply reads clamd's reply up to its NUL (or the connection's end).
func readReply(r io.Reader) (string, error) {
	reply, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadBytes(0)
	if err != nil && !(errors.Is(err, io.EOF) && len(reply) > 0) {
		return "", err
	}
	return string(bytes.TrimRight(reply, "\x00\n")), nil
}

// deadlineConn sets a fresh deadline before every read and write, unless
// ctx has ended.
type deadlineConn struct {
	net.Conn
	ctx     context.Context
	timeout time.Duration
}

func (c *deadlineConn) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	c.SetReadDeadline(time.Now().Add(c.timeout))
	return c.Conn.Read(p)
}

func (c *deadlineConn) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	c.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(p)
}
