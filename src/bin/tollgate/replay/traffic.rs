use super::ReplayError;
use crate::{Output, OutputFormat, Status};
use std::path::Path;
pub(crate) fn generate(_: &Path, _: u64, _: u32, _: u64) -> Result<u64, ReplayError> {
    Err(ReplayError::Input("wip".into()))
}
pub(crate) fn run(
    _: &Path,
    _: &Path,
    _: Option<&Path>,
    _: &Path,
    _: OutputFormat,
    _: &mut Output,
) -> Result<Status, ReplayError> {
    Err(ReplayError::Input("wip".into()))
}
