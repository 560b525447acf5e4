package embedded

import (
	"testing"

	"github.com/sluice-iot/sluice/storage"
	"github.com/sluice-iot/sluice/storage/storagetest"
)

func TestReportConformance(t *testing.T) {
	storagetest.RunReport(t, func(t *testing.T) storage.Backend {
		db, err := Open(t.TempDir(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	})
}
