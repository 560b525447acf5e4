package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluice-iot/sluice/engine"
)

// TestEntitiesLimitBody: a create past a tenant profile's entity limit is
// ThingsBoard's 403 with errorCode 41, the entity type and the limit.
func TestEntitiesLimitBody(t *testing.T) {
	s := New(Config{}, nil, nil, nil, nil)
	var ctx fasthttp.RequestCtx
	s.fail(&ctx, &engine.EntitiesLimitError{
		Err:        &engine.Error{Code: engine.CodeEntitiesLimit, Msg: "Devices limit reached"},
		EntityType: "DEVICE", Limit: 5,
	})
	var body struct {
		Status     int    `json:"status"`
		Message    string `json:"message"`
		ErrorCode  int    `json:"errorCode"`
		Timestamp  int64  `json:"timestamp"`
		EntityType string `json:"entityType"`
		Limit      int64  `json:"limit"`
	}
	if err := json.Unmarshal(ctx.Response.Body(), &body); err != nil {
		t.Fatalf("%s: %v", ctx.Response.Body(), err)
	}
	if ctx.Response.StatusCode() != 403 || body.Status != 403 || body.ErrorCode != 41 || body.Message != "Devices limit reached" ||
		body.EntityType != "DEVICE" || body.Limit != 5 || body.Timestamp == 0 {
		t.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}
