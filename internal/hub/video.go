package hub

import (
	"net/http"
)

// Session videos, as Selenoid serves them:
//
//	GET    /video/          the finished videos (?json: a JSON array of names; else HTML)
//	GET    /video/{file}    one video, with Range (a browser's player seeks)
//	DELETE /video/{file}    remove it
//
// A video is listed only once complete: the launcher writes it under a hidden
// temporary name and renames it when the recorder has finished.
func (h *Hub) video(w http.ResponseWriter, r *http.Request) {
	if name, ok := fileName(w, r, videoFiles); ok {
		h.serveKept(w, r, h.opts.VideoDir, name, videoFiles)
	}
}
