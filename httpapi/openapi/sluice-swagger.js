// sluice-swagger.js starts Swagger UI on the Sluice OpenAPI document and adds the
// one thing stock Swagger UI lacks: authorizing with a username and password.
//
// The document declares ThingsBoard's scheme HttpLoginForm as
// {type: http, scheme: loginPassword}, which stock Swagger UI cannot show. So:
//  1. loginFormPlugin presents that scheme to the UI as HTTP basic. The Authorize
//     dialog then asks for username and password, and Swagger UI puts
//     "Authorization: Basic base64(username:password)" on every operation that
//     accepts HttpLoginForm. (Only the page's copy is changed; /v3/api-docs is not.)
//  2. requestInterceptor swaps that header for a real login: it POSTs the
//     credentials to /api/auth/login (once; the token is kept until it expires)
//     and sends "X-Authorization: Bearer <token>" instead. ApiKeyForm has already
//     written "ApiKey <key>" into that same header, so when both are authorized
//     the JWT overwrites it: the JWT takes precedence, as in ThingsBoard.
//  3. A token the main UI left in localStorage.jwt_token is used without asking:
//     while it has not expired, the login form is pre-authorized with the token's
//     user and a one-off password that step 2 finds already logged in.
(function () {
  "use strict";

  var LOGIN_SCHEME = "loginPassword";
  var LOGIN_URL = "/api/auth/login";

  var loginSchemes = []; // names of the schemes shown as HTTP basic (step 1)
  var tokens = new Map(); // base64 "username:password" -> {token, exp (ms)}

  // claims decodes the payload of a JWT; null when it is not one.
  function claims(jwt) {
    try {
      return JSON.parse(atob(jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    } catch (e) {
      return null;
    }
  }

  function remember(cred, jwt) {
    var c = claims(jwt);
    tokens.set(cred, { token: jwt, exp: c && c.exp ? c.exp * 1000 : 0 });
  }

  // tokenFor returns an access token for the credentials of a Basic header,
  // logging in when none is kept or the kept one expires within 10 s.
  async function tokenFor(cred) {
    var kept = tokens.get(cred);
    if (kept && kept.exp > Date.now() + 10000) {
      return kept.token;
    }
    var raw = atob(cred); // Swagger UI encodes with window.btoa
    var colon = raw.indexOf(":");
    var res = await fetch(LOGIN_URL, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ username: raw.slice(0, colon), password: raw.slice(colon + 1) }),
    });
    var body = await res.json().catch(function () { return {}; });
    if (!res.ok || !body.token) {
      tokens.delete(cred);
      throw new Error("Login at " + LOGIN_URL + " failed: " + res.status + " " + (body.message || res.statusText));
    }
    remember(cred, body.token);
    return body.token;
  }

  // requestInterceptor runs on every request the page sends (step 2).
  async function requestInterceptor(req) {
    var h = req.headers || (req.headers = {});
    var key = h["X-Authorization"];
    // ApiKeyForm wants "ApiKey <value>"; a bare value gets the prefix.
    if (typeof key === "string" && key !== "" && !/^(ApiKey|Bearer) /.test(key)) {
      h["X-Authorization"] = "ApiKey " + key.trim();
    }
    var basic = h.Authorization;
    if (typeof basic === "string" && basic.indexOf("Basic ") === 0) {
      delete h.Authorization;
      h["X-Authorization"] = "Bearer " + (await tokenFor(basic.slice(6)));
    }
    return req;
  }

  // loginFormPlugin shows loginPassword schemes as HTTP basic (step 1).
  function loginFormPlugin() {
    return {
      statePlugins: {
        spec: {
          wrapActions: {
            updateJsonSpec: function (ori) {
              return function (json) {
                var schemes = (json && json.components && json.components.securitySchemes) || {};
                loginSchemes = [];
                Object.keys(schemes).forEach(function (name) {
                  var s = schemes[name];
                  if (s && s.type === "http" && s.scheme === LOGIN_SCHEME) {
                    schemes[name] = Object.assign({}, s, { scheme: "basic" });
                    loginSchemes.push(name);
                  }
                });
                return ori(json);
              };
            },
          },
        },
      },
    };
  }

  // useMainUIToken pre-authorizes the login form with the main UI's token (step 3).
  function useMainUIToken(ui) {
    try {
      var jwt = window.localStorage.getItem("jwt_token");
      var c = jwt && claims(jwt);
      if (!c || c.isPublic || !c.sub || !(c.exp * 1000 > Date.now())) {
        return;
      }
      var password = "main-ui-token-" + Math.random().toString(36).slice(2);
      tokens.set(btoa(c.sub + ":" + password), { token: jwt, exp: c.exp * 1000 });
      loginSchemes.forEach(function (name) {
        ui.preauthorizeBasic(name, c.sub, password);
      });
    } catch (e) {
      // No storage access or a user name btoa cannot encode: authorize by hand.
    }
  }

  window.ui = SwaggerUIBundle({
    url: "/v3/api-docs",
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl, loginFormPlugin],
    layout: "StandaloneLayout",
    validatorUrl: null, // the default badge would call validator.swagger.io
    requestInterceptor: requestInterceptor,
    onComplete: function () {
      useMainUIToken(window.ui);
    },
  });
})();
