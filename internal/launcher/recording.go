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
