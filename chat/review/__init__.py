"""The review desk and content gaps: support looking back at answers, apart from answering them (chat.answering).

- desk: the desk's reads, its queues and counts, an answer or a conversation as a reviewer sees it
- feedback: reviewers' flags on answers and citations, their verdicts on unsupported claims
- scope: what a reviewer's grants open on the desk, who may give a grant, the access log
- judgements: the asker's and reviewers' verdicts on answers, written and read
- evalset: the judged answers exported as an evaluation set (`manage.py export_judgements`)
- curated: support's curated answers, written on the desk and served by chat.answering
- gaps: content gaps, what people asked that the knowledge base could not answer, by topic
- spreadsheet: CSV a spreadsheet opens as text (the gaps report and the access log)
- desk_api, curated_api, gaps_api: their routers under /api/

The desk reads answers through chat.selectors, as the Ask page does (one rule for what is withheld), and its
/api/review/ operations show them with chat.api's schemas; the pages (chat.views, chat/templates/chat/,
chat/static/chat/) stay where Django finds them.
"""
