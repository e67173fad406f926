package events

import (
	"encoding/json"

	"github.com/nats-io/nats.go"
)

// OnVerdict calls wake with the urlId of every upload event (completed or
// rejected) published from now on, through core NATS subscriptions to both
// subjects of the stream: no consumer, nothing kept on the server, and a
// message published while nc is away is missed (the caller must not rely
// on every one). The signer's status waits use it (docs/events.md); the
// subscriptions end with nc. wake runs on nc's delivery goroutine: it must
// not block.
func OnVerdict(nc *nats.Conn, wake func(urlID string)) error {
	handle := func(m *nats.Msg) {
		id := m.Header.Get(nats.MsgIdHdr)
		if id == "" {
			var ev struct {
				URLID string `json:"urlId"`
			}
			if json.Unmarshal(m.Data, &ev) != nil {
				return
			}
			id = ev.URLID
		}
		wake(id)
	}
	for _, subject := range []string{SubjectPrefix + ">", RejectedPrefix + ">"} {
		if _, err := nc.Subscribe(subject, handle); err != nil {
			return err
		}
	}
	return nil
}
