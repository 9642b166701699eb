//! The sign-in page of the manager-served dashboard, and the sign-out button added to the other
//! pages of a signed-in browser.

use super::{escape, page};

/// The marker every page's header ends with ([`super::page`]); the sign-out button goes after it.
const READ_ONLY: &str = "<span class=\"ro\">read-only</span>";

/// The sign-in form: a token (never echoed back), an optional namespace, `next` (where to go
/// after, a local path) and `message` (why the form is shown again; empty for none).
pub fn render(next: &str, message: &str) -> String {
    let message = if message.is_empty() {
        String::new()
    } else {
        format!("<p class=\"error\" id=\"signin-error\">{}</p>", escape(message))
    };
    let body = format!(
        "<h1>Sign in</h1>{message}\
         <p>The dashboard reads the cluster with the token you paste here, and with nothing else: \
         you see what the token may read. Any bearer token the API server accepts will do, such as \
         one from <code>kubectl create token NAME -n NAMESPACE</code> or your identity provider's \
         ID token. It is kept in this browser only, in a cookie scripts cannot read, for 12 hours \
         or until you sign out.</p>\
         <form id=\"login\" method=\"post\" action=\"/login\" class=\"signin\">\
         <input type=\"hidden\" name=\"next\" value=\"{}\">\
         <label>Token <input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"off\" required></label>\
         <label>Namespace <input type=\"text\" name=\"namespace\" id=\"namespace\" placeholder=\"shown when you may not list every namespace\"></label>\
         <button type=\"submit\">Sign in</button></form>",
        escape(next)
    );
    page("Sign in", &body, false)
}

/// `html` (a page) with a sign-out button in its header.
pub fn with_sign_out(html: &str) -> String {
    let button = "<form method=\"post\" action=\"/logout\" class=\"signout\" id=\"signout\">\
                  <button type=\"submit\">Sign out</button></form>";
    html.replacen(READ_ONLY, &format!("{READ_ONLY}{button}"), 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_escapes_what_it_shows_again() {
        let p = render("/applications/a/\"><script>x</script>", "<b>no</b>");
        assert!(p.contains("value=\"/applications/a/&quot;&gt;&lt;script&gt;x&lt;/script&gt;\""), "{p}");
        assert!(p.contains("<p class=\"error\" id=\"signin-error\">&lt;b&gt;no&lt;/b&gt;</p>"), "{p}");
        assert!(p.contains("type=\"password\" name=\"token\""), "{p}");
        assert!(!render("/", "").contains("signin-error"));
    }

    #[test]
    fn the_sign_out_button_goes_in_the_header_once() {
        let p = with_sign_out(&page("x", READ_ONLY, false));
        assert_eq!(p.matches("action=\"/logout\"").count(), 1, "{p}");
        assert!(p.find("id=\"signout\"").unwrap() < p.find("<main>").unwrap(), "{p}");
        assert!(page("x", "", false).contains(READ_ONLY), "the header's marker changed");
    }
}
