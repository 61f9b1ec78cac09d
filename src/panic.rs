//! Panic payloads as text, for the places that catch a panic and carry on (the controller
//! runtime, the service supervisor, init's last words). Below every layer; does nothing else.

use std::any::Any;

/// The message a panic was raised with, or a placeholder for a non-string payload.
pub fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn payloads() {
        let caught = |f: fn()| std::panic::catch_unwind(f).unwrap_err();
        assert_eq!(super::message(&*caught(|| panic!("plain"))), "plain");
        assert_eq!(super::message(&*caught(|| panic!("formatted {}", 7))), "formatted 7");
        assert_eq!(super::message(&*caught(|| std::panic::panic_any(42u8))), "non-string panic payload");
    }
}
