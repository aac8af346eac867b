//! Reading reviews as a viewer may see them: one, a page, their decision
//! snapshots, and the upstream answer of a forwarded one.

use super::*;

impl Reviews {
    /// One review, or `None` when it is unknown or not `viewer`'s.
    pub async fn get(&self, id: &str, viewer: &Viewer) -> Result<Option<ReviewView>, ReviewError> {
        self.get_at(id, viewer, SystemTime::now()).await
    }

    /// [`Reviews::get`] with the status as of `now`.
    pub async fn get_at(
        &self,
        id: &str,
        viewer: &Viewer,
        now: SystemTime,
    ) -> Result<Option<ReviewView>, ReviewError> {
        let row = self.load(id).await?;
        Ok(row
            .filter(|r| viewer.sees(&r.owner))
            .map(|r| view(&r, now, self.approvals_required())))
    }

    /// The decision snapshots of the reviews in `views` (which the caller
    /// was allowed to see), by review id; without the held requests, so a
    /// list page never reads held bodies.
    pub async fn details(
        &self,
        views: &[ReviewView],
    ) -> Result<HashMap<String, serde_json::Value>, ReviewError> {
        let ids: Vec<String> = views.iter().map(|v| v.review_id.clone()).collect();
        let found = on_store(&self.inner, move |s, _| s.details(&ids)).await?;
        Ok(found.into_iter().collect())
    }

    /// One review with its held request and decision snapshot, for a
    /// reviewer; `None` when unknown or not `viewer`'s.
    pub async fn inspect(
        &self,
        id: &str,
        viewer: &Viewer,
    ) -> Result<Option<Inspection>, ReviewError> {
        let Some(view) = self.get(id, viewer).await? else {
            return Ok(None);
        };
        let review_id = id.to_string();
        let found = on_store(&self.inner, move |s, _| s.inspect(&review_id)).await?;
        Ok(found.map(|i| Inspection {
            view,
            path: i.path,
            headers: i.headers,
            body: i.body,
            detail: i.detail,
            upstream: i.upstream,
        }))
    }

    /// The stored upstream answer of a review whose forward is done, so an
    /// app that got `202` can fetch the result of its held call; `None` when
    /// unknown, not `viewer`'s, or not forwarded (yet).
    pub async fn upstream_response(
        &self,
        id: &str,
        viewer: &Viewer,
    ) -> Result<Option<UpstreamResponse>, ReviewError> {
        let review_id = id.to_string();
        let found = on_store(&self.inner, move |s, _| s.upstream(&review_id)).await?;
        Ok(found.and_then(|(owner, response)| viewer.sees(&owner).then_some(response)))
    }

    /// Reviews `viewer` may see, with the given status (as of now) or any.
    /// Pending ones come oldest first, all others newest first; at most
    /// `limit` (capped at [`MAX_LIST_LIMIT`]).
    pub async fn list(
        &self,
        status: Option<ReviewStatus>,
        viewer: &Viewer,
        limit: usize,
    ) -> Result<Vec<ReviewView>, ReviewError> {
        let owner = (!viewer.sees_all).then(|| viewer.name.clone());
        let limit = limit.min(MAX_LIST_LIMIT);
        let now = SystemTime::now();
        let required = self.approvals_required();
        let rows = on_store(&self.inner, move |s, _| {
            s.list(status, owner.as_deref(), now, limit)
        })
        .await?;
        Ok(rows.iter().map(|r| view(r, now, required)).collect())
    }
}
