package store

import "context"

// SetUsageDeleteBatch sets the batch of DeleteUsageBefore on SQLite, so
// that a test needs few records to delete in several batches.
func SetUsageDeleteBatch(s Store, n int) { s.(*sqlStore).deleteBatch = n }

// MigrateTo migrates s down or up to version.
func MigrateTo(s Store, version int64) error {
	ss := s.(*sqlStore)
	p, err := ss.provider(nil)
	if err != nil {
		return err
	}
	ctx := context.Background()
	cur, err := p.GetDBVersion(ctx)
	if err != nil {
		return err
	}
	if version < cur {
		_, err = p.DownTo(ctx, version)
	} else {
		_, err = p.UpTo(ctx, version)
	}
	return err
}
