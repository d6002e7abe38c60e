package hub

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/websummoner/websummoner/internal/webdriver"
)

// maxUploadEntries bounds the entries of an uploaded zip: Selenium sends one
// file, and each entry is work for the driver and a file on its host.
const maxUploadEntries = 64

// errUploadTooLarge is an upload whose zip decompresses to more than
// -max-upload-size.
var errUploadTooLarge = errors.New("the upload decompresses to more than -max-upload-size")

// checkUpload reads a file upload's body, already bounded by MaxBytesReader,
// and refuses it when the zip it carries decompresses to more than
// -max-upload-size or has too many entries: the bound on the body alone let a
// 1 MB zip become a 1 GiB file on the driver's host. The body is put back as
// read, so the driver gets the client's bytes unchanged; a body that is not
// {"file": "<base64 of a zip>"} passes through for the driver to answer.
// It reports whether the request may go on; if not, it has answered.
func (h *Hub) checkUpload(w http.ResponseWriter, r *http.Request) bool {
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			webdriver.WriteError(w, http.StatusRequestEntityTooLarge, webdriver.ErrInvalidArgument, h.uploadTooLarge())
		case r.Context().Err() != nil: // the client left; nobody to answer
		default:
			webdriver.WriteError(w, http.StatusBadRequest, webdriver.ErrInvalidArgument,
				fmt.Sprintf("the file upload's body broke off: %v; send it whole", err))
		}
		return false
	}
	if _, err := checkUploadBody(body, h.opts.MaxUploadSize); err != nil {
		status, msg := http.StatusBadRequest, err.Error()
		if errors.Is(err, errUploadTooLarge) {
			status = http.StatusRequestEntityTooLarge
			msg = fmt.Sprintf("the file upload decompresses to more than -max-upload-size %d MiB (the decompressed size exceeded it, not the %d bytes sent); send a smaller file or raise the limit",
				h.opts.MaxUploadSize>>20, len(body))
		}
		webdriver.WriteError(w, status, webdriver.ErrInvalidArgument, msg)
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return true
}

// checkUploadBody checks every "file" member of a JSON object body (any case,
// every duplicate: JSON readers differ on which one counts) that is a base64
// zip. It returns the bytes it decompressed, which stop just past limit.
func checkUploadBody(body []byte, limit int64) (int64, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, nil // not a JSON object: the driver answers it
	}
	var total int64
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return total, nil
		}
		key, _ := tok.(string)
		if !strings.EqualFold(key, "file") {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return total, nil
			}
			continue
		}
		var v any
		if dec.Decode(&v) != nil {
			return total, nil
		}
		s, ok := v.(string)
		if !ok {
			continue
		}
		n, err := checkZip(s, limit-total)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// checkZip decompresses every entry of the base64 zip b64, counting the bytes
// that come out, and stops as soon as they pass limit. What is not base64 or
// not a zip is left for the driver to refuse.
func checkZip(b64 string, limit int64) (int64, error) {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return 0, nil
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return 0, nil
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
