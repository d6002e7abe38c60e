package launcher

import (
	"math"
	"path"
	"strconv"
	"strings"

	"github.com/websummoner/websummoner/internal/webdriver"
)

// RecordingFile is the name the recorder writes a session's video under:
// "video" and videoName's extension when it is a format the recorder
// writes, ".mp4" otherwise. A videoName is any file name ("login v1.2"), so
// its extension chooses the format only when it names one; the file keeps
// videoName whatever its format.
func RecordingFile(videoName string) string {
	// The formats the recorder's ffmpeg writes with its codec (libx264 by
	// default): it picks the container format by extension.
	switch ext := strings.ToLower(path.Ext(videoName)); ext {
	case ".mp4", ".mkv", ".mov", ".avi", ".webm": // .webm with videoCodec libvpx-vp9
		return "video" + ext
	}
	return "video.mp4"
}

// RecordingType is the media type of a kept video named name: the format
// RecordingFile had the recorder write for it.
func RecordingType(name string) string {
	switch path.Ext(RecordingFile(name)) {
	case ".webm":
		return "video/webm"
	case ".mkv":
		return "video/x-matroska"
	case ".mov":
		return "video/quicktime"
	case ".avi":
		return "video/x-msvideo"
	}
	return "video/mp4"
}

// DefaultVideoMaxSize is -video-max-size's default: hours of an ordinary
// screen, and minutes of one whose every frame changes.
const DefaultVideoMaxSize = 8 << 30

// RecorderEnv is the recorder's environment: Selenoid's recorder contract
// (FILE_NAME, VIDEO_SIZE, FRAME_RATE, CODEC) and VIDEO_MAX_SIZE, the bytes
// at which the project's recorder ends its file (maxSize; 0: none), which
// Selenoid's ignores.
func RecorderEnv(o webdriver.Options, maxSize int64) []string {
	env := []string{"FILE_NAME=" + RecordingFile(o.VideoName), "VIDEO_SIZE=" + o.VideoScreenSize, "FRAME_RATE=" + strconv.Itoa(o.VideoFrameRate),
		"CODEC=" + o.VideoCodec, "DISPLAY=:99", "BROWSER_CONTAINER_NAME=127.0.0.1"}
	if maxSize > 0 {
		env = append(env, "VIDEO_MAX_SIZE="+strconv.FormatInt(maxSize, 10))
	}
	return env
}

// VideoReadBound is the most of a recording the hub copies out for a
// -video-max-size of maxSize (0: no bound): the recorder stops writing
// frames there, then adds the file's index; a larger file (a recorder that
// ignores the bound) is not kept.
func VideoReadBound(maxSize int64) int64 {
	if maxSize <= 0 {
		return math.MaxInt64
	}
	return maxSize + maxSize/16 + 16<<20
}
