package bucket

import "strconv"

// State is a key's stored tokens and stamp, as Redis would hold them.
func (l *Local) State(key string) (t, ts string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.state[key]
	if !ok {
		return "", ""
	}
	return st.T, strconv.FormatInt(st.TS, 10)
}
