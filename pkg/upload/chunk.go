package upload

import "corral.dev/pkg/bus"

// sizeHeader is the header of every chunk that says how many bytes the
// whole content holds: a reader knows from the first chunk how many follow,
// and a content's last chunk, whose presence says the content is staged
// whole, says it too.
const sizeHeader = "Corral-Upload-Size"

// chunkCount is how many chunks a content of size bytes is cut in: none for
// an empty one, which is never uploaded.
func chunkCount(size int64) int {
	return int((size + bus.UploadChunkBytes - 1) / bus.UploadChunkBytes)
}

// chunkLen is the length of chunk i of a content of size bytes.
func chunkLen(size int64, i int) int {
	return int(min(bus.UploadChunkBytes, size-int64(i)*bus.UploadChunkBytes))
}
