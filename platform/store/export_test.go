package store

// SetUsageDeleteBatch sets the batch of DeleteUsageBefore on SQLite, so
// that a test needs few records to delete in several batches.
func SetUsageDeleteBatch(s Store, n int) { s.(*sqlStore).deleteBatch = n }
