package config

import (
	"strings"
	"testing"
)

func TestClickHouseClusterExampleLoads(t *testing.T) {
	c, err := Load("../configs/clickhouse-cluster/sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Production() || c.ClickHouse.CHCluster != "sluice" {
		t.Fatalf("cluster example: %+v", c.ClickHouse)
	}
}

func TestClickHouseCluster(t *testing.T) {
	prod := []string{"CLICKHOUSE_ADDR=127.0.0.1:9000", "REDIS_ADDR=127.0.0.1:6379"}
	f := func(env []string, wantErr string) {
		t.Helper()
		_, err := Load("", env)
		if wantErr == "" {
			if err != nil {
				t.Fatalf("%v: %v", env, err)
			}
			return
		}
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("%v: got %v, want an error containing %q", env, err, wantErr)
		}
	}
	f(append(prod, "CLICKHOUSE_CLUSTER=sluice"), "")
	f(append(prod, "CLICKHOUSE_CLUSTER=shards-2.eu_west"), "")
	f(append(prod, "CLICKHOUSE_CLUSTER=a'b"), "CLICKHOUSE_CLUSTER: must be a cluster name")
	f(append(prod, "CLICKHOUSE_CLUSTER=two words"), "CLICKHOUSE_CLUSTER: must be a cluster name")
	f([]string{"CLICKHOUSE_CLUSTER=sluice"}, "CLICKHOUSE_CLUSTER: needs CLICKHOUSE_ADDR")
	f(append(prod, "CLICKHOUSE_COMPRESSION=none"), "")
	f(append(prod, "CLICKHOUSE_COMPRESSION=zstd"), "")
	f(append(prod, "CLICKHOUSE_COMPRESSION=gzip"), "CLICKHOUSE_COMPRESSION: must be lz4, zstd or none")
}
