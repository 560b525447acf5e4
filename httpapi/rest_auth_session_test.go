package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-iot/sluice/engine"
)

// TestLogoutOutdatesSession: after POST /api/auth/logout the session's access
// token is 401 code 11 "Token has expired" and its refresh token 401 code 10
// "Token is outdated", as ThingsBoard answers; other sessions go on. With an API
// key the logout is a 200 that changes nothing.
func TestLogoutOutdatesSession(t *testing.T) {
	n := startTestNode(t)
	login := map[string]string{"username": engine.DemoTenantAdminEmail, "password": "tenant"}
	p1 := n.pair(n.expect("POST", "/api/auth/login", "", login, 200, ""))
	p2 := n.pair(n.expect("POST", "/api/auth/login", "", login, 200, ""))
	a1, a2 := "Bearer "+p1.Token, "Bearer "+p2.Token

	if out := n.expect("POST", "/api/auth/logout", a1, nil, 200, ""); len(out) != 0 {
		t.Errorf("logout body: %s", out)
	}
	var e apiError
	n.decode(n.expect("GET", "/api/auth/user", a1, nil, 401, "Token has expired"), &e)
	if e.ErrorCode != int(engine.CodeJWTExpired) {
		t.Errorf("access token after logout: code %d", e.ErrorCode)
	}
	n.decode(n.expect("POST", "/api/auth/token", "", map[string]string{"refreshToken": p1.RefreshToken}, 401, "Token is outdated"), &e)
	if e.ErrorCode != int(engine.CodeAuthentication) {
		t.Errorf("refresh token after logout: code %d", e.ErrorCode)
	}
	n.expect("POST", "/api/auth/logout", a1, nil, 401, "Token has expired")

	n.expect("GET", "/api/auth/user", a2, nil, 200, "")
	n.pair(n.expect("POST", "/api/auth/token", "", map[string]string{"refreshToken": p2.RefreshToken}, 200, ""))

	var key struct {
		Value string `json:"value"`
	}
	n.decode(n.expect("POST", "/api/apiKey", a2, map[string]any{"description": "ci"}, 200, ""), &key)
	n.expect("POST", "/api/auth/logout", "ApiKey "+key.Value, nil, 200, "")
	n.expect("GET", "/api/auth/user", "ApiKey "+key.Value, nil, 200, "")
	n.expect("GET", "/api/auth/user", a2, nil, 200, "")
}

// TestUserCredentialsEnabled: POST /api/user/{id}/userCredentialsEnabled
// refuses a disabled user's access token, refresh token, API key and login;
// enabled again (the default of the parameter), the user logs in.
func TestUserCredentialsEnabled(t *testing.T) {
	n := startTestNode(t)
	admin, sys := n.tenant(), n.sysadmin()
	u, bearer := n.newUser(admin, map[string]any{"email": "op@example.com", "authority": engine.TenantAdmin})
	login := map[string]string{"username": "op@example.com", "password": "password1"}
	pair := n.pair(n.expect("POST", "/api/auth/login", "", login, 200, ""))
	var key struct {
		Value string `json:"value"`
	}
	n.decode(n.expect("POST", "/api/apiKey", bearer, map[string]any{"description": "ci"}, 200, ""), &key)
	path := "/api/user/" + u.ID.ID.String() + "/userCredentialsEnabled"

	n.expect("POST", path+"?userCredentialsEnabled=false", n.customer(), nil, 403, "")
	n.expect("POST", path+"?userCredentialsEnabled=false", bearer, nil, 200, "") // itself: a tenant admin may
	n.expect("POST", path+"?userCredentialsEnabled=true", admin, nil, 200, "")
	n.expect("POST", path+"?userCredentialsEnabled=maybe", admin, nil, 400, "")
	n.expect("POST", "/api/user/nope/userCredentialsEnabled", admin, nil, 400, "")
	n.expect("POST", "/api/user/"+strings.Repeat("0", 8)+"-0000-0000-0000-000000000001/userCredentialsEnabled", admin, nil, 404, "")
	pair = n.pair(n.expect("POST", "/api/auth/login", "", login, 200, ""))
	n.expect("GET", "/api/auth/user", "Bearer "+pair.Token, nil, 200, "")

	n.expect("POST", path+"?userCredentialsEnabled=false", admin, nil, 200, "")
	n.expect("GET", "/api/auth/user", "Bearer "+pair.Token, nil, 401, "Token has expired")
	n.expect("POST", "/api/auth/token", "", map[string]string{"refreshToken": pair.RefreshToken}, 401, "Token is outdated")
	n.expect("GET", "/api/auth/user", "ApiKey "+key.Value, nil, 401, "User account is not active")
	n.expect("POST", "/api/auth/login", "", login, 401, "User account is not active")

	n.expect("POST", path, admin, nil, 200, "") // userCredentialsEnabled defaults to true
	n.expect("GET", "/api/auth/user", n.bearer("op@example.com", "password1"), nil, 200, "")
	n.expect("GET", "/api/auth/user", "ApiKey "+key.Value, nil, 200, "")

	// A system administrator may not disable itself.
	var me engine.User
	n.decode(n.expect("GET", "/api/auth/user", sys, nil, 200, ""), &me)
	n.expect("POST", "/api/user/"+me.ID.ID.String()+"/userCredentialsEnabled?userCredentialsEnabled=false", sys, nil, 403,
		"Sysadmin is not allowed to disable himself")
	n.expect("GET", "/api/auth/user", sys, nil, 200, "")
}

// TestCheckActivateToken: the activation link answers 200 with how to use it
// while the token works, 409 with a JSON error once it is unknown or spent.
func TestCheckActivateToken(t *testing.T) {
	n := startTestNode(t)
	admin := n.tenant()
	var u engine.User
	n.decode(n.expect("POST", "/api/user?sendActivationMail=false", admin,
		map[string]any{"email": "new@example.com", "authority": engine.TenantAdmin}, 200, ""), &u)
	link := string(n.expect("GET", "/api/user/"+u.ID.ID.String()+"/activationLink", admin, nil, 200, ""))
	path := strings.TrimPrefix(link, n.URL)
	_, token, _ := strings.Cut(link, "activateToken=")

	var info struct {
		ActivateToken string `json:"activateToken"`
		Message       string `json:"message"`
	}
	n.decode(n.expect("GET", path, "", nil, 200, ""), &info)
	if info.ActivateToken != token || !strings.Contains(info.Message, "POST") || !strings.Contains(info.Message, "/api/noauth/activate") {
		t.Errorf("check answer: %+v", info)
	}
	n.expect("GET", path, "", nil, 200, "") // not spent by looking
	n.expect("GET", "/api/noauth/activate?activateToken=nope", "", nil, http.StatusConflict, "Unable to find user credentials by activateToken")
	n.expect("GET", "/api/noauth/activate", "", nil, http.StatusConflict, "")
	n.pair(n.expect("POST", "/api/noauth/activate", "", map[string]string{"activateToken": token, "password": "password1"}, 200, ""))
	n.expect("GET", path, "", nil, http.StatusConflict, "Unable to find user credentials by activateToken")
}

// TestPasswordPolicyAndReset: the policy is ThingsBoard's JSON with Sluice's
// limits, and a reset request answers 200 whether or not the user exists.
func TestPasswordPolicyAndReset(t *testing.T) {
	n := startTestNode(t)
	out := n.expect("GET", "/api/noauth/userPasswordPolicy", "", nil, 200, "")
	want := `{"minimumLength":6,"maximumLength":72,"minimumUppercaseLetters":null,"minimumLowercaseLetters":null,` +
		`"minimumDigits":null,"minimumSpecialCharacters":null,"allowWhitespaces":true,` +
		`"forceUserToResetPasswordIfNotValid":false,"passwordExpirationPeriodDays":null,"passwordReuseFrequencyDays":null}`
	if string(out) != want {
		t.Errorf("policy:\n%s\nwant\n%s", out, want)
	}
	for _, email := range []string{engine.DemoTenantAdminEmail, "ghost@example.com"} {
		if out := n.expect("POST", "/api/noauth/resetPasswordByEmail", "", map[string]string{"email": email}, 200, ""); len(out) != 0 {
			t.Errorf("reset body: %s", out)
		}
	}
	n.expect("POST", "/api/noauth/resetPasswordByEmail", "", "{not json", 400, "")
	n.bearer(engine.DemoTenantAdminEmail, "tenant") // the password is unchanged

	// The policy's messages.
	tenant := n.tenant()
	n.expect("POST", "/api/auth/changePassword", tenant,
		map[string]string{"currentPassword": "tenant", "newPassword": strings.Repeat("a", 73)}, 400,
		"Password must be no more than 72 characters in length.")
	n.expect("POST", "/api/auth/changePassword", tenant,
		map[string]string{"currentPassword": "tenant", "newPassword": "abc"}, 400,
		"Password must be 6 or more characters in length.")
}
