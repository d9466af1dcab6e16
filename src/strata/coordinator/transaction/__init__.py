"""The transaction coordinator: transactional ids, their state machine and the ``__transaction_state`` log."""
