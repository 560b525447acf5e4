package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluice-iot/sluice/engine"
)

func TestLoginAndRefresh(t *testing.T) {
	n := startTestNode(t)
	login := func(body any, status int, msg string) []byte {
		t.Helper()
		return n.expect("POST", "/api/auth/login", "", body, status, msg)
	}
	out := login(map[string]string{"username": engine.DemoTenantAdminEmail, "password": "tenant"}, 200, "")
	if strings.Contains(string(out), "scope") {
		t.Errorf("scope must be omitted: %s", out)
	}
	var pair engine.JWTPair
	n.decode(out, &pair)
	if pair.Token == "" || pair.RefreshToken == "" {
		t.Fatalf("pair: %s", out)
	}
	login(map[string]string{"username": engine.DemoTenantAdminEmail, "password": "nope"}, 401, "Invalid username or password")
	login(map[string]string{"username": "ghost@example.com", "password": "tenant"}, 401, "Invalid username or password")
	login(map[string]string{"username": engine.DemoTenantAdminEmail}, 401, "Authentication failed")
	login(map[string]string{"username": "", "password": "x"}, 401, "Authentication failed")
	login("{not json", 401, "Authentication failed")
	login(nil, 401, "Authentication failed")
	for _, m := range []string{"GET", "PUT", "DELETE", "PATCH"} {
		n.expect(m, "/api/auth/login", "", nil, 401, "Authentication method not supported")
	}

	refresh := func(body any, status int, msg string) []byte {
		t.Helper()
		return n.expect("POST", "/api/auth/token", "", body, status, msg)
	}
	var next engine.JWTPair
	n.decode(refresh(map[string]string{"refreshToken": pair.RefreshToken}, 200, ""), &next)
	if next.Token == "" || next.RefreshToken == "" || next.Token == pair.Token {
		t.Fatalf("refresh pair: %+v", next)
	}
	n.expect("GET", "/api/auth/user", "Bearer "+next.Token, nil, 200, "")
	// An access token for refreshing: 500 code 2, as ThingsBoard's
	// AuthExceptionHandler answers its IllegalArgumentException (compat §7.3).
	var e apiError
	n.decode(refresh(map[string]string{"refreshToken": pair.Token}, 500, "Invalid Refresh Token scope"), &e)
	if e.ErrorCode != int(engine.CodeGeneral) {
		t.Errorf("access token refreshed: code %d", e.ErrorCode)
	}
	for _, m := range []string{"GET", "PUT", "DELETE", "PATCH"} {
		n.expect(m, "/api/auth/token", "", nil, 401, "Authentication method not supported")
	}
	refresh(map[string]string{"refreshToken": ""}, 401, "Authentication failed")
	refresh("[]", 401, "Authentication failed")
	refresh(map[string]string{"refreshToken": "a.b.c"}, 401, "Invalid username or password")
	// A refresh token does not open the API.
	n.expect("GET", "/api/auth/user", "Bearer "+pair.RefreshToken, nil, 401, "Invalid username or password")
}

func TestAuthHeaders(t *testing.T) {
	n := startTestNode(t)
	tok := n.tenant()
	raw := strings.TrimPrefix(tok, "Bearer ")

	f := func(headers map[string]string, status int, msg string) {
		t.Helper()
		req, _ := http.NewRequest("GET", n.URL+"/api/auth/user", nil)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != status {
			t.Errorf("%v: status %d, want %d", headers, resp.StatusCode, status)
		}
	}
	f(map[string]string{"X-Authorization": tok}, 200, "")
	f(map[string]string{"Authorization": tok}, 200, "")
	f(map[string]string{"X-Authorization": "  ", "Authorization": tok}, 200, "")
	f(map[string]string{"X-Authorization": tok, "Authorization": "Bearer junk"}, 200, "")
	f(map[string]string{"X-Authorization": "Bearer junk", "Authorization": tok}, 401, "")
	f(map[string]string{}, 401, "")
	f(map[string]string{"X-Authorization": "bearer " + raw}, 401, "")
	f(map[string]string{"X-Authorization": raw}, 401, "")
	f(map[string]string{"X-Authorization": "ApiKey tb_123"}, 401, "")

	n.expect("GET", "/api/auth/user", "", nil, 401, "Authentication failed")
	n.expect("GET", "/api/auth/user", "Bearer x.y.z", nil, 401, "Invalid username or password")
	// A token signed with another key reads as expired, as in ThingsBoard.
	var claims jwt.MapClaims
	if _, _, err := jwt.NewParser().ParseUnverified(raw, &claims); err != nil {
		t.Fatal(err)
	}
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, claims).SignedString([]byte("not the key"))
	n.expect("GET", "/api/auth/user", "Bearer "+forged, nil, 401, "Token has expired")
	claims["exp"] = time.Now().Add(-time.Hour).Unix()
	expired, _ := jwt.NewWithClaims(jwt.SigningMethodHS512, claims).SignedString([]byte("httpapi-test-key"))
	body := n.expect("GET", "/api/auth/user", "Bearer "+expired, nil, 401, "Token has expired")
	var e apiError
	n.decode(body, &e)
	if e.ErrorCode != 11 {
		t.Errorf("expired code %d", e.ErrorCode)
	}
}

func TestCurrentUserAndLogout(t *testing.T) {
	n := startTestNode(t)
	body := n.expect("GET", "/api/auth/user", n.customer(), nil, 200, "")
	var u map[string]any
	n.decode(body, &u)
	for _, k := range []string{"id", "createdTime", "tenantId", "customerId", "email", "authority", "firstName", "lastName", "phone", "version", "name", "additionalInfo"} {
		if _, ok := u[k]; !ok {
			t.Errorf("user lacks %q: %s", k, body)
		}
	}
	if strings.Contains(strings.ToLower(string(body)), "password") {
		t.Fatalf("user body mentions a password: %s", body)
	}
	id, _ := u["id"].(map[string]any)
	if id["entityType"] != "USER" || u["authority"] != "CUSTOMER_USER" || u["name"] != engine.DemoCustomerUserEmail {
		t.Errorf("user: %s", body)
	}
	cid, _ := u["customerId"].(map[string]any)
	if cid["id"] != n.Demo.DemoCustomerID.String() {
		t.Errorf("customerId: %s", body)
	}
	body = n.expect("GET", "/api/auth/user", n.tenant(), nil, 200, "")
	n.decode(body, &u)
	cid, _ = u["customerId"].(map[string]any)
	if cid["id"] != engine.NullUUID.String() {
		t.Errorf("tenant admin customerId: %s", body)
	}

	tenant := n.tenant()
	if out := n.expect("POST", "/api/auth/logout", tenant, nil, 200, ""); len(out) != 0 {
		t.Errorf("logout body: %s", out)
	}
	n.expect("GET", "/api/auth/user", tenant, nil, 401, "Token has expired") // see TestLogoutOutdatesSession
	n.expect("POST", "/api/auth/logout", "", nil, 401, "Authentication failed")
}
