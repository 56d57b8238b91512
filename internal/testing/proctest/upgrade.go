package proctest

import (
	"io"
	"net/http"
)

// EchoUpgrade answers a request with 101 Switching Protocols to WebSocket
// and echoes every byte that follows, until the client closes: the app end
// of an upgraded stream that a test carries through a proxy.
func EchoUpgrade(w http.ResponseWriter, _ *http.Request) {
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer nc.Close()
	io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	io.Copy(nc, brw)
}
