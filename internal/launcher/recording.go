package launcher

import (
	"path"
	"strings"
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
