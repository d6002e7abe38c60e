package hub

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/websummoner/websummoner/internal/session"
	"github.com/websummoner/websummoner/internal/webdriver"
)

// maxUploadEntries bounds the entries of an uploaded zip: Selenium sends one
// file, and each entry is work for the driver and a file on its host.
const maxUploadEntries = 64

// uploadBudget is how many -max-upload-size uploads the hub holds in memory
// at once, from their first byte until the request to their driver is
// written whole (a WebKit one until the hub has unpacked it): each
// costs its body and, while checked, its decoded zip. Those over the budget
// wait their turn, for uploadWait at most.
const uploadBudget = 4

// uploadWait bounds an upload's wait for its turn: past it, 500 and
// Retry-After. A client that left while waiting is not seen until then (its
// body unread, its connection is not watched).
const uploadWait = time.Minute

// uploadTurn waits for an upload's share of the budget: its Content-Length,
// or -max-upload-size when chunked. It returns the function that gives the
// share back, once; false if it has answered instead (too large, or no
// turn within uploadWait). The body's -body-read-timeout does not run while
// it waits: an HTTP/2 body cut by it could not be read after.
func (h *Hub) uploadTurn(w http.ResponseWriter, r *http.Request) (func(), bool) {
	if r.ContentLength > h.opts.MaxUploadSize {
		webdriver.WriteError(w, http.StatusRequestEntityTooLarge, webdriver.ErrInvalidArgument, h.uploadTooLarge())
		return nil, false
	}
	held := r.ContentLength
	if held < 0 { // chunked: up to the limit
		held = h.opts.MaxUploadSize
	}
	clock, _ := r.Body.(bodyClock)
	if clock != nil {
		clock.PauseTimeout()
	}
	ctx, cancel := context.WithTimeout(r.Context(), uploadWait)
	give, err := h.uploads.take(ctx, userOf(r), held)
	cancel()
	if clock != nil {
		clock.RestartTimeout()
	}
	if err != nil {
		if r.Context().Err() == nil {
			msg := fmt.Sprintf("the hub is checking as many file uploads as it holds at once (%d of -max-upload-size %d MiB), and this one found no turn within %v; send it again", uploadBudget, h.opts.MaxUploadSize>>20, uploadWait)
			if errors.Is(err, errUserHalf) {
				msg = fmt.Sprintf("your other uploads being checked hold half of what the hub checks at once (%d of -max-upload-size %d MiB), as much as one user may, and this one found no turn within %v; send them one after another", uploadBudget/2, h.opts.MaxUploadSize>>20, uploadWait)
			}
			w.Header().Set("Retry-After", "10")
			webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnknownError, msg)
		}
		return nil, false
	}
	return give, true
}

// sentBody is a checked upload on its way to the driver. Once the request
// is written whole (written, from the Transport's WroteRequest), its bytes
// are let go and its share of the budget is given back (sent): a driver busy
// with the session's earlier command may answer much later, and must not
// hold the budget for everyone else's uploads meanwhile. Until then the
// Transport may read it again from the start (again, its GetBody): a POST
// is resent only when nothing of it was written.
type sentBody struct {
	mu   sync.Mutex
	data []byte // nil once written
	sent func()
}

// reader is one reading of the body from its start.
func (b *sentBody) reader() io.ReadCloser { return &sentReader{b: b} }

// again is reader for the Transport's GetBody; an error once the body was
// written whole and let go.
func (b *sentBody) again() (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.data == nil {
		return nil, errors.New("the file upload was already sent whole, and its bytes were let go")
	}
	return b.reader(), nil
}

// written lets the bytes go and gives the share back, once the request is
// written whole.
func (b *sentBody) written() {
	b.mu.Lock()
	b.data = nil
	b.mu.Unlock()
	b.sent()
}

// trace is ctx with written hooked to the request's being written whole.
func (b *sentBody) trace(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			b.written()
		}
	}})
}

// sentReader reads a sentBody; a body let go reads as ended, and the
// Transport, finding fewer bytes than Content-Length, sends nothing short.
type sentReader struct {
	b   *sentBody
	off int
}

func (r *sentReader) Read(p []byte) (int, error) {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	if r.off >= len(r.b.data) {
		return 0, io.EOF
	}
	n := copy(p, r.b.data[r.off:])
	r.off += n
	return n, nil
}

func (r *sentReader) Close() error { return nil }

// errUploadTooLarge is an upload whose zip decompresses to more than
// -max-upload-size.
var errUploadTooLarge = errors.New("the upload decompresses to more than -max-upload-size")

// checkUpload reads a file upload's body, already bounded by MaxBytesReader,
// and refuses it when the zip it carries decompresses to more than
// -max-upload-size or has too many entries: the bound on the body alone let a
// 1 MB zip become a 1 GiB file on the driver's host. The body is put back as
// read (a sentBody), so the driver gets the client's bytes unchanged. A body that is not
// strictly {"file": "<base64 of a zip>"} is refused too: a JSON reader laxer
// than Go's (Chromium's takes comments) would otherwise unpack a zip the check
// never saw. It reports whether the request may go on; if not, it has answered.
func (h *Hub) checkUpload(w http.ResponseWriter, r *http.Request, sent func()) (*sentBody, bool) {
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			webdriver.WriteError(w, http.StatusRequestEntityTooLarge, webdriver.ErrInvalidArgument, h.uploadTooLarge())
		default:
			bodyBrokeOff(w, r, err)
		}
		return nil, false
	}
	if _, err := checkUploadBody(body, h.opts.MaxUploadSize); err != nil {
		status, msg := http.StatusBadRequest, err.Error()
		if errors.Is(err, errUploadTooLarge) {
			status = http.StatusRequestEntityTooLarge
			msg = fmt.Sprintf("the file upload decompresses to more than -max-upload-size %d MiB (the decompressed size exceeded it, not the %d bytes sent); send a smaller file or raise the limit",
				h.opts.MaxUploadSize>>20, len(body))
		}
		webdriver.WriteError(w, status, webdriver.ErrInvalidArgument, msg)
		return nil, false
	}
	b := &sentBody{data: body, sent: sent}
	// Sent with its length, chunked or not as it came: drivers drop chunked bodies.
	r.Body, r.ContentLength, r.GetBody, r.TransferEncoding = b.reader(), int64(len(body)), b.again, nil
	return b, true
}

// notAnUpload is the refusal of a body that is not a file upload the hub can
// check.
func notAnUpload(why string) error {
	return fmt.Errorf(`a file upload is strict JSON {"file": "<base64 of a zip>"}, as Selenium sends it; %s`, why)
}

// checkUploadBody checks a file upload's body: strict JSON, an object, whose
// every "file" member (any case, every duplicate: JSON readers differ on
// which one counts), of which there is at least one, is a base64 zip. It
// returns the bytes it decompressed, which stop just past limit.
func checkUploadBody(body []byte, limit int64) (int64, error) {
	if !json.Valid(body) {
		return 0, notAnUpload("this body is not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, notAnUpload("this body is not a JSON object")
	}
	var total int64
	files := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return total, notAnUpload(err.Error())
		}
		key, _ := tok.(string)
		if !strings.EqualFold(key, "file") {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return total, notAnUpload(err.Error())
			}
			continue
		}
		files++
		var s string
		if err := dec.Decode(&s); err != nil {
			return total, notAnUpload(fmt.Sprintf("its %q member is not a string", key))
		}
		n, err := checkZip(s, limit-total)
		total += n
		if err != nil {
			return total, err
		}
	}
	if files == 0 {
		return 0, notAnUpload(`this body has no "file" member`)
	}
	return total, nil
}

// checkZip decompresses every entry of the base64 zip b64, counting the bytes
// that come out, and stops as soon as they pass limit. What is not base64 or
// not a zip the hub can read is refused: what it cannot read, it cannot bound.
func checkZip(b64 string, limit int64) (int64, error) {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return 0, notAnUpload(fmt.Sprintf(`its "file" is not standard base64 (%v)`, err))
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return 0, notAnUpload(fmt.Sprintf(`its "file" is not a zip (%v)`, err))
	}
	if len(zr.File) > maxUploadEntries {
		return 0, fmt.Errorf("the file upload's zip has %d entries; the hub passes on at most %d (Selenium sends one file): zip fewer files", len(zr.File), maxUploadEntries)
	}
	var total int64
	for _, f := range zr.File {
		n, err := entrySize(data, f, limit-total)
		total += n
		if total > limit {
			return total, errUploadTooLarge
		}
		if err != nil {
			return total, fmt.Errorf("the file upload's zip entry %q cannot be read: %w; send a zip made by a zip tool or Selenium", f.Name, err)
		}
	}
	return total, nil
}

// entrySize is the number of bytes f decompresses to, read at most to
// limit+1. The sizes its headers declare are not believed: a stored entry
// runs to its declared end or the data's, whichever comes first, and a
// deflated one is inflated from its start until its stream ends, as an
// inflater that ignores the declared compressed size would.
func entrySize(data []byte, f *zip.File, limit int64) (int64, error) {
	off, err := f.DataOffset()
	if err != nil {
		return 0, err
	}
	if off < 0 || off > int64(len(data)) {
		return 0, errors.New("its data lies outside the zip")
	}
	rest := bytes.NewReader(data[off:])
	var src io.Reader
	switch f.Method {
	case zip.Store:
		src = io.LimitReader(rest, int64(min(max(f.CompressedSize64, f.UncompressedSize64), uint64(len(data)))))
	case zip.Deflate:
		fr := flate.NewReader(rest)
		defer fr.Close()
		src = fr
	default:
		return 0, fmt.Errorf("compression method %d is neither stored (0) nor deflated (8)", f.Method)
	}
	n, err := io.CopyN(io.Discard, src, max(limit, 0)+1)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// storeUpload stores a file upload for a driver that has no /file of its own
// (WebKitWebDriver), as Selenium Grid's node does: the zip's one file goes to
// a directory of the session's that its browser can read — under a local
// driver's download directory (which its sandbox binds), or through the
// image's file server into its container — and the answer is its path, for
// the client's next "send keys" to the file input. The body has been
// checked (checkUpload): its size is bounded.
func (h *Hub) storeUpload(w http.ResponseWriter, r *http.Request, s *session.Session) {
	var in struct {
		File string `json:"file"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &in); err != nil || in.File == "" {
		webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument, `a file upload is {"file": "<base64 of a zip of one file>"}`)
		return
	}
	name, data, err := uploadedFile(in.File, h.opts.MaxUploadSize)
	if err != nil {
		webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument, "the file upload: "+err.Error())
		return
	}
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	sub := hex.EncodeToString(token)
	files := s.Endpoints().Files
	var path string
	switch {
	case files != nil && files.Scheme == "file":
		// Within the download directory only: its browser writes there, and a
		// ".uploads" link it planted must not lead the hub's write elsewhere.
		var root *os.Root
		if root, err = os.OpenRoot(files.Path); err == nil {
			rel := filepath.Join(".uploads", sub, name)
			if err = root.MkdirAll(filepath.Dir(rel), 0o755); err == nil {
				err = root.WriteFile(rel, data, 0o644)
			}
			root.Close()
			path = filepath.Join(files.Path, rel)
		}
	case files != nil:
		path, err = h.uploadToImage(r.Context(), files, sub, name, data)
	default:
		err = errors.New("its browser has no file server to receive it (port 8080 of Selenoid's image contract)")
	}
	if err != nil {
		webdriver.WriteError(w, http.StatusInternalServerError, webdriver.ErrUnknownError, fmt.Sprintf("session %s: storing the file upload %q: %v", s.ID, name, err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"value": path})
}

// uploadedFile is the one file of an upload's zip: its base name and bytes,
// read at most to limit.
func uploadedFile(b64 string, limit int64) (string, []byte, error) {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", nil, fmt.Errorf("not base64: %w", err)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return "", nil, fmt.Errorf("not a zip: %w", err)
	}
	if len(zr.File) != 1 {
		return "", nil, fmt.Errorf("the zip has %d entries; this browser takes one file at a time", len(zr.File))
	}
	f := zr.File[0]
	name := filepath.Base(filepath.Clean("/" + strings.ReplaceAll(f.Name, `\`, "/")))
	if name == "/" || name == "." || strings.HasPrefix(name, ".") {
		return "", nil, fmt.Errorf("the zip's entry %q is not a plain file name", f.Name)
	}
	rc, err := f.Open()
	if err != nil {
		return "", nil, err
	}
	defer rc.Close()
	out, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return "", nil, err
	}
	if int64(len(out)) > limit {
		return "", nil, errUploadTooLarge
	}
	return name, out, nil
}

// uploadToImage hands an upload to the image's file server (cmd/fileserver:
// POST /.uploads/{dir}/{name}), which stores it beside, not among, the
// downloads, and answers the path inside the container.
func (h *Hub) uploadToImage(ctx context.Context, files *url.URL, sub, name string, data []byte) (string, error) {
	u := files.JoinPath(".uploads", sub, name)
	ctx, cancel := context.WithTimeout(ctx, h.opts.SessionAttemptTimeout)
	defer cancel()
	status, answer, err := h.driverCall(ctx, http.MethodPost, u, data, 4096)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK || !strings.HasPrefix(string(answer), "/") {
		return "", fmt.Errorf("the image's file server answered %d %q (an image without the project's file server cannot take uploads for WebKit)", status, webdriver.Truncate(answer, 200))
	}
	return strings.TrimSpace(string(answer)), nil
}
