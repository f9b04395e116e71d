package rdma

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/osfproject/osf/sdp"
)

// watchEvery is OSF_DEBUG_RDMA_WATCH_MS (0: off): how often the engine
// looks for streams that made no progress with work pending (debugging a
// stall: docs/DESIGN.md D4).
var watchEvery = func() time.Duration {
	ms, _ := strconv.Atoi(os.Getenv("OSF_DEBUG_RDMA_WATCH_MS"))
	return time.Duration(max(ms, 0)) * time.Millisecond
}()

// watchSample is what watchdog saw of one stream.
type watchSample struct {
	appHead, sent, rxHead, rxTail, credited uint64
	callerWcs, engineWcs                    uint64
}

// watchdog logs, at debug, each stream whose positions did not move since
// its last look while something waited: bytes the application published
// and nobody sent (unsent), bytes the peer sent that the application did
// not read (unread), a credit due and not posted (credit-due); with the
// words that say who should act (the application's want flags, waiter and
// token counts, the engine's want flags, the locks, the completions each
// side took). It only reads. Engine goroutine only.
func (e *Engine) watchdog() {
	for _, s := range e.streams {
		if s.state.dead() || s.linkDown {
			continue
		}
		cur := watchSample{
			appHead: s.seg.Head(s.side), sent: s.tx.sent(),
			rxHead: s.tx.rxHead(), rxTail: s.seg.Tail(s.peer), credited: s.tx.credited(),
		}
		cur.callerWcs, cur.engineWcs, _ = s.tx.rxCounts()
		prev := s.watched
		s.watched = &cur
		if prev == nil || *prev != cur {
			continue
		}
		var why []string
		if cur.appHead != cur.sent {
			why = append(why, "unsent")
		}
		if cur.rxHead != cur.rxTail {
			why = append(why, "unread")
		}
		if s.tx.creditDue(cur.rxTail, false) {
			why = append(why, "credit-due")
		}
		if len(why) == 0 {
			continue
		}
		s.logf("rdma: watch: connection %d %s for %v: app head %d sent %d peer tail %d; rx head %d tail %d credited %d; app want rx %d waiters %d tokens %d; engine want rx %d tx %d; locks tx %d rx %d; posted %d completed %d; completions caller %d engine %d; engine slept %v ago for %v",
			s.id, strings.Join(why, ","), watchEvery, cur.appHead, cur.sent, s.tx.peerTail(), cur.rxHead, cur.rxTail, cur.credited,
			s.seg.LoadWant(s.side, sdp.WantRx), s.seg.Waiters(s.side, sdp.WantRx), s.seg.Tokens(s.side, sdp.WantRx),
			s.seg.LoadWant(s.peer, sdp.WantRx), s.seg.LoadWant(s.peer, sdp.WantTx),
			atomic.LoadUint32(s.tx.word(&s.tx.p.lock)), atomic.LoadUint32(s.tx.word(&s.tx.p.rx.lock)),
			s.tx.posted(), s.tx.completed(), cur.callerWcs, cur.engineWcs, time.Since(e.sleptAt), e.sleptFor)
	}
	e.after(watchEvery, e.watchdog)
}
