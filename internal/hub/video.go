package hub

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gorilla/mux"

	"github.com/websummoner/websummoner/internal/webdriver"
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
	name, err := url.PathUnescape(mux.Vars(r)["name"])
	if err != nil || strings.ContainsAny(name, `/\`) || name == "." || name == ".." || strings.HasPrefix(name, ".") {
		webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument,
			fmt.Sprintf("%q is not a video name: names have no path and do not start with \".\"", mux.Vars(r)["name"]))
		return
	}
	// Videos of every user's sessions are the operator's to serve.
	if h.opts.Auth != nil && h.opts.Auth.Enabled() && !h.opts.Auth.Admin(userOf(r)) {
		webdriver.WriteError(w, http.StatusForbidden, webdriver.ErrUnknownError, "videos are served to -admin-users only")
		return
	}
	if h.opts.VideoDir == "" {
		webdriver.WriteError(w, http.StatusNotFound, webdriver.ErrUnsupportedOperation, "no videos are kept: this hub records none (-video-output-dir is unset or not writable, or it runs with -disable-docker)")
		return
	}
	serveDir(w, r, h.opts.VideoDir, name, videoFiles)
}
