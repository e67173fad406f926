// Package verdict holds the long polls of GET /uploads/{urlId}?wait=N:
// the Hub bounds how many wait at once (per client address and per signer
// instance) and wakes a wait when the completer's event for its urlId
// arrives on NATS (Subscribe). A wait keeps no state outside this process:
// a signer SIGKILLed mid-wait leaves nothing behind (the client's
// connection breaks and it asks again, of any instance).
package verdict

import (
	"net/netip"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/mintgate/mintgate/shared/events"
)

// Defaults of MINTGATE_STATUS_WAITERS_PER_ADDRESS and
// MINTGATE_STATUS_WAITERS: a page uploading 20 files at once waits for
// each file's verdict, and one signer parks at most 2000 waits (each an
// HTTP handler's goroutine and a channel, a few KiB).
const (
	DefaultPerAddress = 20
	DefaultTotal      = 2000
)

// Hub bounds the waits in progress and wakes them. Its zero value is not
// usable: New builds one.
type Hub struct {
	perAddress, total int
	done              <-chan struct{}

	mu      sync.Mutex
	byAddr  map[string]int
	count   int
	waiters map[string]map[chan struct{}]struct{} // by urlId
}

// New bounds waits to perAddress from one address and total in all; done
// closes when the signer shuts down, which ends every wait (Done).
func New(perAddress, total int, done <-chan struct{}) *Hub {
	return &Hub{
		perAddress: perAddress, total: total, done: done,
		byAddr: map[string]int{}, waiters: map[string]map[chan struct{}]struct{}{},
	}
}

// Done is closed when the signer shuts down: a wait then answers with the
// status it reads, at once, so the drain never waits for a long poll.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Addr is the key of a's waits: an IPv6 caller's /64, as its read and
// anonymous sign buckets, so rotating through one's own addresses buys
// no more waits.
func Addr(a netip.Addr) string {
	if a.Is6() && !a.Is4In6() {
		return netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
	}
	return a.Unmap().String()
}

// Wait is one wait admitted by Enter: Wake receives when the urlId's event
// arrives; Leave gives its place back (once; deferred by the handler).
type Wait struct {
	Wake <-chan struct{}
	h    *Hub
	addr string
	id   string
	ch   chan struct{}
}

// Enter admits a wait for urlID from addr, or returns nil when addr
// already has perAddress waits or the signer total (the caller answers
// 429).
func (h *Hub) Enter(addr, urlID string) *Wait {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.count >= h.total || h.byAddr[addr] >= h.perAddress {
		return nil
	}
	h.count++
	h.byAddr[addr]++
	ch := make(chan struct{}, 1)
	if h.waiters[urlID] == nil {
		h.waiters[urlID] = map[chan struct{}]struct{}{}
	}
	h.waiters[urlID][ch] = struct{}{}
	return &Wait{Wake: ch, h: h, addr: addr, id: urlID, ch: ch}
}

// Leave ends the wait: its place is free for another.
func (w *Wait) Leave() {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count--
	if h.byAddr[w.addr]--; h.byAddr[w.addr] <= 0 {
		delete(h.byAddr, w.addr)
	}
	delete(h.waiters[w.id], w.ch)
	if len(h.waiters[w.id]) == 0 {
		delete(h.waiters, w.id)
	}
}

// Waiting is how many waits are in progress.
func (h *Hub) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// Wake wakes every wait for urlID; a wait already woken stays woken once
// (its channel holds one signal), so a wake never blocks.
func (h *Hub) Wake(urlID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.waiters[urlID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Subscribe wakes the waits from the completer's events
// (events.OnVerdict: core NATS subscriptions, no consumer and no state on
// the server). An event only wakes: the wait reads the status from Redis
// again, so a forged or stale message costs one read and decides nothing.
// A missed event (NATS down, a reconnect) is covered by the waits' own
// periodic read. The subscription ends with nc.
func (h *Hub) Subscribe(nc *nats.Conn) error { return events.OnVerdict(nc, h.Wake) }
