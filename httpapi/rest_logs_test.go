package httpapi

import (
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/engine"
)

// TestNoSecretsInLogs runs logins (good, bad, locked), refresh, password change,
// activation, API keys (good, disabled, unknown) and the device API (good and bad
// tokens) with debug logging, then checks no password, token or key is in the log.
func TestNoSecretsInLogs(t *testing.T) {
	n := startTestNode(t, func(c *engine.Config) { c.LoginMaxFailures = 2 })
	var secrets []string
	keep := func(s ...string) { secrets = append(secrets, s...) }
	keep("Wr0ng-Guess-QQQ", "S3cret-Pass-XYZ", "Fresh-Pass-789", "DEV_SECRET_TOKEN_123", "UNKNOWN_DEV_TOKEN_456")

	login := func(user, pw string, status int) []byte {
		t.Helper()
		return n.expect("POST", "/api/auth/login", "", map[string]string{"username": user, "password": pw}, status, "")
	}
	pair := n.pair(login(engine.DemoTenantAdminEmail, "tenant", 200))
	keep(pair.Token, pair.RefreshToken)
	ta := "Bearer " + pair.Token
	next := n.pair(n.expect("POST", "/api/auth/token", "", map[string]string{"refreshToken": pair.RefreshToken}, 200, ""))
	keep(next.Token, next.RefreshToken)
	changed := n.pair(n.expect("POST", "/api/auth/changePassword", ta, map[string]string{"currentPassword": "tenant", "newPassword": "S3cret-Pass-XYZ"}, 200, ""))
	keep(changed.Token, changed.RefreshToken)
	n.expect("GET", "/api/auth/user", ta, nil, 401, "Token has expired")
	n.expect("POST", "/api/auth/token", "", map[string]string{"refreshToken": pair.RefreshToken}, 401, "")
	ta = "Bearer " + changed.Token
	login(engine.DemoTenantAdminEmail, "Wr0ng-Guess-QQQ", 401)
	login(engine.DemoTenantAdminEmail, "Wr0ng-Guess-QQQ", 401)
	login(engine.DemoTenantAdminEmail, "S3cret-Pass-XYZ", 401) // locked
	n.expect("GET", "/api/auth/user", "Bearer "+pair.Token+"x", nil, 401, "")

	var u engine.User
	n.decode(n.expect("POST", "/api/user", ta, map[string]any{"email": "act@example.com", "authority": "TENANT_ADMIN"}, 200, ""), &u)
	link := string(n.expect("GET", "/api/user/"+u.ID.ID.String()+"/activationLink", ta, nil, 200, ""))
	_, token, _ := strings.Cut(link, "activateToken=")
	keep(token)
	n.expect("POST", "/api/noauth/activate", "", map[string]string{"activateToken": token + "x", "password": "Fresh-Pass-789"}, 400, "")
	act := n.pair(n.expect("POST", "/api/noauth/activate", "", map[string]string{"activateToken": token, "password": "Fresh-Pass-789"}, 200, ""))
	keep(act.Token, act.RefreshToken)

	var k engine.APIKey
	n.decode(n.expect("POST", "/api/apiKey", ta, map[string]any{"description": "logs", "enabled": true}, 200, ""), &k)
	keep(*k.Value, strings.TrimPrefix(*k.Value, engine.APIKeyPrefix))
	key := "ApiKey " + *k.Value
	n.expect("POST", "/api/device?accessToken=DEV_SECRET_TOKEN_123", key, map[string]string{"name": "logged"}, 200, "")
	n.expect("PUT", "/api/apiKey/"+k.ID.ID.String()+"/enabled/false", ta, nil, 200, "")
	n.expect("GET", "/api/auth/user", key, nil, 401, "User account is not active")
	n.expect("GET", "/api/auth/user", key+"x", nil, 401, "")
	n.expect("POST", "/api/v1/DEV_SECRET_TOKEN_123/telemetry", "", `{"t":1}`, 200, "")
	n.expect("POST", "/api/v1/DEV_SECRET_TOKEN_123/telemetry", "", `{bad`, 400, "")
	n.expect("POST", "/api/v1/UNKNOWN_DEV_TOKEN_456/telemetry", "", `{"t":1}`, 401, "")
	n.expect("GET", "/api/v1/DEV_SECRET_TOKEN_123/attributes?clientKeys=x", "", nil, 200, "")

	logs := n.Logs.String()
	for _, want := range []string{"login refused", "authentication refused"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q; the flow did not log what it should:\n%s", want, logs)
		}
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(logs, s) {
			t.Errorf("secret %.12q… is in the log:\n%s", s, logs)
		}
	}
}
