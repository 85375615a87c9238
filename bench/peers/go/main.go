// A broadcast server the way people write one with Go's net/http and
// gorilla/websocket: connections in a slice under a mutex; a broadcast holds
// the lock and starts one goroutine per connection that writes the text
// message, then waits for them all. Written for skewscope's side-by-side
// benchmark (bench/run); it knows nothing of skewscope.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

var message = strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 8)[:450]

type hub struct {
	mu    sync.Mutex
	conns []*websocket.Conn
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// -compress: permessage-deflate as gorilla offers it (no context takeover,
// each message compressed for each connection).
var compress = flag.Bool("compress", false, "negotiate permessage-deflate and compress every message")

func (h *hub) ws(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c.EnableWriteCompression(*compress)
	h.mu.Lock()
	h.conns = append(h.conns, c)
	h.mu.Unlock()
	// Keep reading so pings, closes and disconnects are noticed.
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			break
		}
	}
	h.mu.Lock()
	for i, x := range h.conns {
		if x == c {
			h.conns = append(h.conns[:i], h.conns[i+1:]...)
			break
		}
	}
	h.mu.Unlock()
	c.Close()
}

// startTest broadcasts the test message; with ?lead=SECONDS it carries a
// time to act, as an app that wants its clients to act together sends it:
// JSON with the moment in the server's clock (the one line that matters:
// "at": time.Now().Add(lead).UnixNano()), padded to the same 450 bytes.
func (h *hub) startTest(w http.ResponseWriter, r *http.Request) {
	lead := r.URL.Query().Get("lead")
	if lead == "" {
		h.broadcast(w, []byte(message))
		return
	}
	seconds, err := strconv.ParseFloat(lead, 64)
	if err != nil {
		http.Error(w, "lead is seconds, like 0.03", http.StatusBadRequest)
		return
	}
	at := time.Now().Add(time.Duration(seconds * float64(time.Second))).UnixNano()
	head := fmt.Sprintf(`{"type":"go","at":%d,"pad":"`, at)
	room := 450 - len(head) - 2
	if room < 0 {
		room = 0
	}
	h.broadcast(w, []byte(head+message[:room]+`"}`))
}

// publish broadcasts the request body as a text message.
func (h *hub) publish(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.broadcast(w, body)
}

func (h *hub) broadcast(w http.ResponseWriter, payload []byte) {
	start := time.Now()
	h.mu.Lock()
	var wg sync.WaitGroup
	for _, c := range h.conns {
		wg.Add(1)
		go func(c *websocket.Conn) {
			defer wg.Done()
			c.WriteMessage(websocket.TextMessage, payload)
		}(c)
	}
	wg.Wait()
	n := len(h.conns)
	h.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"clients": n, "total_ms": float64(time.Since(start).Microseconds()) / 1000})
}

func (h *hub) healthz(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	n := len(h.conns)
	h.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"clients": n})
}

func main() {
	addr := flag.String("listen", "127.0.0.1:8090", "address to listen on")
	flag.Parse()
	upgrader.EnableCompression = *compress
	h := &hub{}
	http.HandleFunc("/ws", h.ws)
	http.HandleFunc("/start_test", h.startTest)
	http.HandleFunc("/publish", h.publish)
	http.HandleFunc("/healthz", h.healthz)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
